from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from . import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(template_name="registration/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("jobs.urls")),
    path("api/v1/", include("notifications.api_urls")),
    path("api/v1/", include("monitoring.api_urls")),  # POST jobs/<id>/diagnoses/stacks/
    path("api/schema/", SpectacularAPIView.as_view(permission_classes=[views.ApiDocsAccess]), name="schema"),
    path("api/docs/", views.api_docs_page(SpectacularSwaggerSplitView.as_view(url_name="schema")), name="api-docs"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("", include("jobs.sdk.urls")),
    path("", include("jobs.page_urls")),
    path("", include("notifications.urls")),
    path("", include("monitoring.page_urls")),  # trying a retryable keyword on past failures
    path("", views.dashboard, name="dashboard"),
]


handler400 = "console.views.bad_request"
