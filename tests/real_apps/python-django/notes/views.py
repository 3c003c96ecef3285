import json
from pathlib import Path

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from notes.models import Note


def home(request):
    message = (Path(settings.BASE_DIR) / "message.txt").read_text().strip()
    collected = (Path(settings.STATIC_ROOT) / "notes" / "style.css").exists()
    return HttpResponse(f"python-django says: {message}; static collected: {collected}\n",
                        content_type="text/plain")


def health(request):
    return HttpResponse("ok", content_type="text/plain")


@csrf_exempt
def notes(request):
    if request.method == "POST":
        Note.objects.create(text=json.loads(request.body)["text"])
    return JsonResponse([note.text for note in Note.objects.order_by("id")], safe=False)
