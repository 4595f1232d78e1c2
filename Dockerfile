# One image for every codevolve process: the controller with the API (`codevolve serve`), CPU
# workers (`codevolve worker`) and the command line. GPU workers use the same image on a host with
# the NVIDIA container toolkit (see docker-compose.yml, profile "gpu").
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-compile . \
    && useradd --create-home --uid 1000 codevolve

# Workers sandbox candidates in forked children with rlimits; when started as root they also
# isolate them in namespaces under an unprivileged uid (docs/security.md). The default user is
# unprivileged; the compose file runs workers as root only where that isolation is wanted.
USER codevolve
EXPOSE 8000
ENTRYPOINT ["codevolve"]
CMD ["--help"]
