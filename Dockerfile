# One image for every m1flow service (`python -m svc_<name>`) and for one-shot jobs.
# Built once per `docker compose build` (only the policy0 service names the build; see
# docker-compose.yml). Build arguments and secret:
#   BASE_IMAGE   a Python 3.11 image with pip (default python:3.11-slim; scripts/docker_images.sh
#                builds a local stand-in where no image registry answers)
#   TORCH_INDEX  an extra pip index, e.g. https://download.pytorch.org/whl/cpu for a small CPU torch
#   secret ca_bundle  a PEM bundle pip should trust (a TLS-inspecting proxy's); used for the build
#                only, never stored in the image (M1FLOW_CA_BUNDLE in docker-compose.yml)
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
LABEL org.m1flow.image=services

ENV PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    OMP_NUM_THREADS=1
WORKDIR /app

# System tools of the sandbox's jail backend and of code/SWE tasks (bubblewrap, gcc, git, patch).
COPY scripts/system_deps.sh scripts/apt_install.sh scripts/
RUN bash scripts/system_deps.sh && rm -rf /var/lib/apt/lists/*

# Dependencies before the code, so editing code does not reinstall torch.
ARG TORCH_INDEX=""
COPY requirements.txt .
RUN --mount=type=secret,id=ca_bundle \
    if [ -s /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle; fi; \
    pip install --progress-bar off ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} -r requirements.txt
# Secure mode's identities and the learner's announcement signatures (m1flow/security) need
# cryptography, which requirements.txt does not name (the host's venv has it only as another
# package's dependency); the venv's version, in a layer of its own so that the one above stays cached.
RUN --mount=type=secret,id=ca_bundle \
    if [ -s /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle; fi; \
    pip install --progress-bar off cryptography==50.0.2

# The trust store containers use when the cluster is given one (docker/entrypoint.sh).
COPY docker/entrypoint.sh /usr/local/bin/m1flow-entrypoint
ENTRYPOINT ["/usr/local/bin/m1flow-entrypoint"]

COPY . .
# Generate the protobuf/gRPC modules at build time, not in every container at start-up.
RUN python -m m1flow.protogen

# The default command runs nothing in particular; compose names the service to run.
CMD ["python", "-m", "ops", "--help"]
