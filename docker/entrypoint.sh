#!/bin/sh
# Trust the CA bundle mounted at /run/secrets/ca_bundle when one was given (M1FLOW_CA_BUNDLE in
# docker-compose.yml; an empty file otherwise), so pip and HTTPS clients work behind a
# TLS-inspecting proxy; the bundle itself is never part of the image.
if [ -s /run/secrets/ca_bundle ]; then
  export SSL_CERT_FILE=/run/secrets/ca_bundle REQUESTS_CA_BUNDLE=/run/secrets/ca_bundle \
         PIP_CERT=/run/secrets/ca_bundle CURL_CA_BUNDLE=/run/secrets/ca_bundle
fi
exec "$@"
