from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from . import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(template_name="registration/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("jobs.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("healthz", views.healthz, name="healthz"),
    path("", views.dashboard, name="dashboard"),
]

# Apps that bring pages or SDK endpoints register them here as they land.
for optional in ("jobs.sdk_urls", "jobs.page_urls", "notifications.urls", "monitoring.urls"):
    try:
        __import__(optional)
    except ModuleNotFoundError as exc:
        if exc.name != optional:
            raise
        continue
    urlpatterns.insert(-1, path("", include(optional)))
