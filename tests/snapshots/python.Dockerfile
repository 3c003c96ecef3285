# Injected by Preview Orchestrator (framework: python) because the repository has no Dockerfile.
FROM python:3.12-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY . .
RUN if [ -f requirements.txt ]; then python3 -m pip install --no-cache-dir -r requirements.txt; fi
USER 10001:10001
EXPOSE 8000
CMD ["/bin/sh", "-c", "exec python3 app.py"]
