# syntax=docker/dockerfile:1
# servinglib's container image: `servinglib-server` as PID 1 (exec form, so SIGTERM starts its
# graceful drain), a non-root user, no compilers. Build from the repository root:
#
#   docker build -t servinglib:0.1.0 .                                   # with TensorFlow
#   docker build --build-arg VARIANT=python -t servinglib:0.1.0-python .  # Python models only
#   docker build --build-arg CLOUD=0 -t servinglib:0.1.0-local .          # no bucket clients
#
# Both stages install nothing but deploy/docker/install-servinglib, the same pinned install
# (constraints.txt) as the README's `pip install '.[all]'`; tests/deploy run that script.
# Guide: docs/guides/kubernetes.md.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG VARIANT=tensorflow
# 1: with the clients of s3://, gs:// and az:// base paths (the `cloud` extra); 0: without.
# (An ARG is in the environment of RUN, which install-servinglib reads.)
ARG CLOUD=1
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY servinglib/ servinglib/
COPY deploy/docker/install-servinglib /usr/local/bin/install-servinglib
RUN install-servinglib /opt/servinglib "${VARIANT}" /src

FROM ${PYTHON_IMAGE}
ARG VARIANT=tensorflow
LABEL org.opencontainers.image.title="servinglib" \
      org.opencontainers.image.description="TensorFlow-Serving-style model server (${VARIANT} variant)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 servinglib \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin servinglib
COPY --from=build /opt/servinglib /opt/servinglib
# MODEL_NAME and MODEL_BASE_PATH as TF Serving's image: without model flags the server serves
# $MODEL_BASE_PATH/$MODEL_NAME (docker run -v "$PWD/my_model:/models/model" servinglib:0.1.0).
ENV PATH=/opt/servinglib/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MODEL_NAME=model \
    MODEL_BASE_PATH=/models
# Numeric, so Kubernetes' runAsNonRoot can check it.
USER 10001:10001
WORKDIR /models
# TF Serving's ports: gRPC 8500, REST 8501 (KServe's runtime passes 9000 and 8080).
EXPOSE 8500 8501
ENTRYPOINT ["servinglib-server"]
CMD ["--port=8500", "--rest_api_port=8501"]
