# syntax=docker/dockerfile:1

# Base images are pinned by tag only: no digest could be verified from the
# machine this was written on (no registry access). Pin both by digest at
# release: `crane digest golang:1.26-bookworm` and
# `crane digest gcr.io/distroless/static-debian12:nonroot`, then
# FROM image:tag@sha256:<digest> (Dependabot or Renovate keep it fresh).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
        -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/rproxy ./cmd/rproxy

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/rproxy /rproxy
USER nonroot:nonroot
EXPOSE 6380
# Distroless has no shell or curl: the binary checks its own admin endpoint,
# from inside the container, so the admin port stays on the container's
# loopback: POST /reload and /debug/pprof are not reachable from outside.
# To scrape /metrics from outside, run with a config that sets
# admin: "0.0.0.0:9121" and admin_token_file (a mounted secret), publish
# 9121, and give Prometheus the token; without a token rproxy refuses an
# admin address off loopback (unless admin_allow_unauthenticated: true).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
        CMD ["/rproxy", "-healthcheck", "127.0.0.1:9121"]
ENTRYPOINT ["/rproxy"]
CMD ["-listen", "0.0.0.0:6380", "-upstream", "redis:6379", "-admin", "127.0.0.1:9121"]
