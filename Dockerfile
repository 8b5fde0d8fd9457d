# syntax=docker/dockerfile:1
# BASE_IMAGE: any Debian-based image with Python 3.11 and its venv module; the official
# one by default (`make image-test` builds on a Debian base made by mmdebstrap).
ARG BASE_IMAGE=python:3.11-slim-bookworm

# Build stage: the same install script `make` runs, into a self-contained venv.
FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY scripts/install-python.sh scripts/
COPY src/ src/
RUN scripts/install-python.sh /opt/tritonwatch

# Runtime stage: the venv only, run as an unprivileged user.
FROM ${BASE_IMAGE}
# REVISION: the commit built (tritonwatch_build_info's revision label).
ARG REVISION=unknown
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin tritonwatch
COPY --from=build /opt/tritonwatch /opt/tritonwatch
ENV PATH=/opt/tritonwatch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TRITONWATCH_LISTEN=0.0.0.0:9849 \
    TRITONWATCH_LOG_FORMAT=json \
    TRITONWATCH_REVISION=${REVISION}
USER 10001
EXPOSE 9849
ENTRYPOINT ["tritonwatch"]
CMD ["run", "--config", "/etc/tritonwatch/config.yaml"]
