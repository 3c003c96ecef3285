from django.urls import path
from notes import views

urlpatterns = [
    path("", views.home),
    path("health", views.health),
    path("notes", views.notes),
]
