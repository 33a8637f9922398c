# The operator image, for machines with a Docker engine (or buildah, kaniko):
#   docker build -t localhost/tooladapter-operator:dev .
# `make image` builds the equivalent without one (hack/image: Debian bookworm's python3,
# no shell). Both install the same pinned wheels (hack/image/requirements.lock).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY hack/image/requirements.lock ./
RUN pip install --no-cache-dir --no-compile --no-deps --require-hashes --only-binary=:all: \
      --target /install -r requirements.lock
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && pip install --no-cache-dir --no-compile --no-deps --target /install /wheels/*.whl \
 && rm -rf /install/bin \
 && python -m compileall -q --invalidation-mode unchecked-hash /install

FROM ${PYTHON_IMAGE}
RUN groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --home-dir /home/nonroot --create-home \
      --shell /usr/sbin/nologin nonroot \
 && install -d -o 65532 -g 65532 /var/lib/tooladapter
COPY --from=build /install /usr/local/lib/python3.11/site-packages
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["python3", "-m", "tooladapter"]
CMD ["run"]
