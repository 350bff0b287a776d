# The project on real bmv2: simple_switch_grpc from p4lang's official image, Mininet from the
# image's Ubuntu, and the controller in a Python 3.11 virtual environment (the Ubuntu of
# p4lang's images ships an older python3; uv fetches a standalone 3.11).
# Used by docker-compose.yml for the `mininet`, `controller` and `closed-loop` services.
FROM p4lang/behavioral-model:latest

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      mininet iproute2 iputils-ping ethtool tcpdump ca-certificates \
 && rm -rf /var/lib/apt/lists/*

COPY --from=ghcr.io/astral-sh/uv:latest /uv /usr/local/bin/uv

WORKDIR /ina
COPY pyproject.toml README.md ./
COPY controller controller
COPY dataplane dataplane
COPY p4src p4src
COPY mininet mininet
COPY topologies topologies
RUN uv venv --python 3.11 /opt/venv \
 && VIRTUAL_ENV=/opt/venv uv pip install --no-cache -e . \
 && ln -s "$(dirname "$(dpkg -L mininet | grep '/mininet/__init__.py$' | head -1)")" \
      "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/mininet"

# Debian/Ubuntu's mn runs the system python3; run it with the venv's so that mininet/ina.py
# finds the controller's dependencies: /opt/venv/bin/python /usr/bin/mn --custom ...
ENV PATH=/opt/venv/bin:$PATH VIRTUAL_ENV=/opt/venv
CMD ["ina", "--help"]
