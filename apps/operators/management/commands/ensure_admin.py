"""``python manage.py ensure_admin --password-file .run/dev/admin-password``: the admin login that
``make run`` prints. Created once with a generated password kept in the file (mode 0600); an
existing user's password is never changed here (``manage.py changepassword admin`` does that)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Create the admin superuser with a generated password if absent; print the login."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password-file", type=Path, required=True)

    def handle(self, *args: Any, username: str, password_file: Path, **options: Any) -> None:
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is None:
            password = secrets.token_urlsafe(12)
            user_model.objects.create_superuser(username=username, email="", password=password)
            password_file.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(password + "\n")
        else:
            stored = password_file.read_text().strip() if password_file.exists() else ""
            password = (
                stored
                if stored and user.check_password(stored)
                else f"(unchanged; set one with: python manage.py changepassword {username})"
            )
        self.stdout.write(f"username: {username}")
        self.stdout.write(f"password: {password}")
