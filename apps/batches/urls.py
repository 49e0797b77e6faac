from django.urls import path

from apps.batches.views import BatchCancelView, BatchCreateView, BatchDetailView

urlpatterns = [
    path("batches", BatchCreateView.as_view(), name="batches"),
    path("batches/<str:batch_id>", BatchDetailView.as_view(), name="batch-detail"),
    path("batches/<str:batch_id>/cancel", BatchCancelView.as_view(), name="batch-cancel"),
]
