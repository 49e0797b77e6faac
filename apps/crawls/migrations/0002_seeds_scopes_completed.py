"""A crawl starts from a list of seeds (its single ``url`` becomes the one seed), its scopes are
named as the API names them (``host`` -> ``same_origin``, ``domain`` -> ``same_site``, and
``prefix`` is new) and an ended crawl is ``completed`` (``succeeded`` and ``failed`` merge: the
pages' own statuses say how they ended). The crawls table is small: rewritten in one step."""

from django.db import migrations, models

_SCOPES = {"host": "same_origin", "domain": "same_site"}


def forward(apps, schema_editor):
    Crawl = apps.get_model("crawls", "Crawl")
    for crawl in Crawl.objects.all().only("id", "url", "scope", "status").iterator():
        Crawl.objects.filter(id=crawl.id).update(
            seeds=[crawl.url],
            scope=_SCOPES.get(crawl.scope, crawl.scope),
            status="completed" if crawl.status in ("succeeded", "failed") else crawl.status,
        )


def backward(apps, schema_editor):
    Crawl = apps.get_model("crawls", "Crawl")
    back = {v: k for k, v in _SCOPES.items()}
    for crawl in Crawl.objects.all().only("id", "seeds", "scope", "status").iterator():
        Crawl.objects.filter(id=crawl.id).update(
            url=(crawl.seeds or [""])[0],
            scope=back.get(crawl.scope, "host"),
            status="succeeded" if crawl.status == "completed" else crawl.status,
        )


class Migration(migrations.Migration):
    dependencies = [("crawls", "0001_initial")]

    operations = [
        migrations.AddField(model_name="crawl", name="seeds", field=models.JSONField(default=list)),
        migrations.AlterField(
            model_name="crawl",
            name="url",
            field=models.TextField(default=""),
        ),
        migrations.AlterField(
            model_name="crawl",
            name="scope",
            field=models.CharField(
                choices=[("same_origin", "Same Origin"), ("same_site", "Same Site"), ("prefix", "Prefix")],
                default="same_origin",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="crawl",
            name="status",
            field=models.CharField(
                choices=[("running", "Running"), ("completed", "Completed"), ("cancelled", "Cancelled")],
                default="running",
                max_length=16,
            ),
        ),
        migrations.RunPython(forward, backward),
    ]
