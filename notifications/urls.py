"""Pages under /workspaces/<slug>/notifications/ (included at the root by console.urls)."""

from django.urls import path

from . import views

app_name = "notifications"

base = "workspaces/<slug:slug>/notifications/"

urlpatterns = [
    path(base, views.index, name="index"),
    path(base + "channels/", views.channel_list, name="channels"),
    path(base + "channels/add/", views.channel_form, name="channel-add"),
    path(base + "channels/<int:channel_id>/edit/", views.channel_form, name="channel-edit"),
    path(base + "channels/<int:channel_id>/test/", views.channel_test, name="channel-test"),
    path(base + "channels/<int:channel_id>/delete/", views.channel_delete, name="channel-delete"),
    path(base + "rules/", views.rule_list, name="rules"),
    path(base + "rules/add/", views.rule_form, name="rule-add"),
    path(base + "rules/preview/", views.rule_preview, name="rule-preview"),
    path(base + "rules/<int:rule_id>/preview/", views.rule_preview, name="rule-edit-preview"),
    path(base + "rules/<int:rule_id>/edit/", views.rule_form, name="rule-edit"),
    path(base + "rules/<int:rule_id>/toggle/", views.rule_toggle, name="rule-toggle"),
    path(base + "rules/<int:rule_id>/delete/", views.rule_delete, name="rule-delete"),
    path(base + "rules/<int:rule_id>/deliveries/", views.rule_deliveries, name="rule-deliveries"),
    path(base + "rules/<int:rule_id>/deliveries/<int:delivery_id>/redeliver/", views.redeliver, name="redeliver"),
]
