# One image for web, worker, beat and migrate (different commands in compose.yaml).
FROM python:3.12-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HEARTH_DATA_DIR=/data \
    HEARTH_WEIGHTS_DIR=/weights
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY gateway/native/ gateway/native/
# The relay's C extension (setup.py, gateway/native/) is compiled here; the compiler goes again in the same layer.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --no-compile . \
    && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --uid 1000 hearth && mkdir /data /weights && chown hearth /data /weights
# The code belongs to root and is read-only to the app; only /data is the app's. .dockerignore keeps .env,
# data/, .venv, .git, caches, tests and benchmarks out (tests/test_image.py checks the build context).
COPY . .
# Not root. The worker reaches the host's Docker daemon through /var/run/docker.sock, which belongs to the
# host's docker group: compose.yaml adds that group (DOCKER_GID in .env) to the worker instead of running it
# as root.
USER hearth
EXPOSE 8000
# The web's check (compose.yaml gives the same one, and the worker and beat their own, migrate none): /ready answers
# before Django (gateway.probes), whatever ALLOWED_HOSTS names, and says whether the database and Redis answer.
HEALTHCHECK --interval=10s --timeout=5s --retries=5 --start-period=60s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/ready', timeout=4)"
CMD ["python", "-m", "appliance.web_server", "--host", "0.0.0.0", "--port", "8000"]
