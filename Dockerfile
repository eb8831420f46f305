# syntax=docker/dockerfile:1
#
# specmon in a container: `specmon run` reading /etc/specmon/specmon.yml, serving :10920.
#
#   docker build -t specmon .
#   docker run --rm -p 10920:10920 -v "$PWD/specmon.yml:/etc/specmon/specmon.yml:ro" specmon
#
# The config in the image (deploy/systemd/specmon.yml) watches 127.0.0.1:8000 and
# 127.0.0.1:8080, the engines' default ports: right for a sidecar that shares the engine's
# network namespace; mount your own file over it otherwise. Reload: `docker kill -s HUP NAME`.
# Flags after the image name replace the CMD, so repeat --config.file when you add any.
#
# tests/deploy/test_dockerfile.py runs this file's build-stage steps in a clean venv (every
# RUN of the build stage, with /opt/specmon and /src mapped to temporary folders), so keep
# paths in RUN lines to $VIRTUAL_ENV and relative paths.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    VIRTUAL_ENV=/opt/specmon
WORKDIR /src
COPY pyproject.toml README.md ./
# The dependencies first, listed from pyproject.toml alone: a layer that a builder's cache
# keeps until they change (a change to specmon's code then rebuilds in seconds, not a minute).
# With the "tap" extra (uvloop: the tap's event loop, about half its CPU per streamed chunk).
RUN python -m venv "$VIRTUAL_ENV" \
    && python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print(*p["dependencies"], *p["optional-dependencies"]["tap"], sep="\n")' > requirements.txt \
    && "$VIRTUAL_ENV/bin/pip" install --requirement requirements.txt
COPY specmon/ specmon/
COPY deploy/systemd/specmon.yml specmon.yml
# pip builds the wheel with hatchling (fetched into an isolated build environment) and
# installs it into the venv that the runtime stage copies; pip itself is not needed at run
# time. The last two commands fail the build, not the deployment, when the package or the
# shipped config is broken.
RUN "$VIRTUAL_ENV/bin/pip" install --no-deps . \
    && "$VIRTUAL_ENV/bin/pip" uninstall --yes pip setuptools \
    && "$VIRTUAL_ENV/bin/specmon" --version \
    && "$VIRTUAL_ENV/bin/specmon" check-config specmon.yml \
    && install -d -m 0700 /var/lib/specmon

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="specmon" \
      org.opencontainers.image.description="Speculative-decoding acceptance, break-even and speed-up from vLLM, llama.cpp and SGLang, for Prometheus" \
      org.opencontainers.image.source="https://github.com/specmon/specmon" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV VIRTUAL_ENV=/opt/specmon \
    PATH=/opt/specmon/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/specmon /opt/specmon
COPY deploy/systemd/specmon.yml /etc/specmon/specmon.yml
# Where a deployment mounts the state volume (state_dir: the configuration epochs kept across
# restarts), owned by the image's user so that a fresh named volume takes its owner and mode
# (made in the build stage: nothing runs at build time in this one).
COPY --from=build --chown=10920:10920 /var/lib/specmon /var/lib/specmon
# A numeric user, so that Kubernetes' runAsNonRoot can check it without /etc/passwd. specmon
# writes nothing but its state, to that volume: the root filesystem can be read-only.
USER 10920:10920
EXPOSE 10920
# No curl in the image: the venv's Python asks /healthz (the process is alive and serving),
# over TLS without verifying the certificate when --web.config.file turned TLS on (the probe
# needs no password; a server requiring client certificates needs another health command).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-m", "specmon.web.probe", "http://127.0.0.1:10920/healthz"]
ENTRYPOINT ["specmon", "run"]
CMD ["--config.file=/etc/specmon/specmon.yml"]
