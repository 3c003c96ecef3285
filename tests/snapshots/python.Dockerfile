# Injected by Preview Orchestrator (framework: python) because the repository has no Dockerfile.
FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The app's user owns /app: Django's collectstatic, uploads and the like write there.
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin app && install -d -o app -g app /app
WORKDIR /app
COPY --chown=app:app . .
USER app
EXPOSE 8000
CMD ["/bin/sh", "-c", "exec python3 app.py"]
