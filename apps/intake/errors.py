from rest_framework.views import exception_handler as api_exception_handler  # placeholder

__all__ = ["api_exception_handler"]
