# One image for every m1flow service (`python -m svc_<name>`) and for one-shot jobs.
# CPU-only torch (much smaller):
#   TORCH_INDEX=https://download.pytorch.org/whl/cpu docker compose build
FROM python:3.11-slim

ENV PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    OMP_NUM_THREADS=1
WORKDIR /app

# System tools of the sandbox's jail backend and of code/SWE tasks (bubblewrap, gcc, git, patch).
COPY scripts/system_deps.sh scripts/system_deps.sh
RUN bash scripts/system_deps.sh && rm -rf /var/lib/apt/lists/*

# Dependencies before the code, so editing code does not reinstall torch.
ARG TORCH_INDEX=""
COPY requirements.txt .
RUN pip install ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} -r requirements.txt

COPY . .
# Generate the protobuf/gRPC modules at build time, not in every container at start-up.
RUN python -m m1flow.protogen

# The default command runs nothing in particular; compose names the service to run.
CMD ["python", "-m", "m1flow", "--help"]
