from django.urls import path

from apps.crawls.views import CrawlCancelView, CrawlCreateView, CrawlDetailView, CrawlPagesView, CrawlWarcView

urlpatterns = [
    path("crawls", CrawlCreateView.as_view(), name="crawls"),
    path("crawls/<str:crawl_id>", CrawlDetailView.as_view(), name="crawl-detail"),
    path("crawls/<str:crawl_id>/pages", CrawlPagesView.as_view(), name="crawl-pages"),
    path("crawls/<str:crawl_id>/warc", CrawlWarcView.as_view(), name="crawl-warc"),
    path("crawls/<str:crawl_id>/cancel", CrawlCancelView.as_view(), name="crawl-cancel"),
]
