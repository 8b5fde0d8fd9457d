# syntax=docker/dockerfile:1
# Build stage: the same install script `make` runs, into a self-contained venv.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY scripts/install-python.sh scripts/
COPY src/ src/
RUN scripts/install-python.sh /opt/tritonwatch

# Runtime stage: the venv only, run as an unprivileged user.
FROM python:3.11-slim-bookworm
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin tritonwatch
COPY --from=build /opt/tritonwatch /opt/tritonwatch
ENV PATH=/opt/tritonwatch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TRITONWATCH_LISTEN=0.0.0.0:9849 \
    TRITONWATCH_LOG_FORMAT=json
USER 10001
EXPOSE 9849
ENTRYPOINT ["tritonwatch"]
CMD ["run", "--config", "/etc/tritonwatch/config.yaml"]
