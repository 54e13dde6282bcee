# syntax=docker/dockerfile:1

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
EXPOSE 6380 9121
# Distroless has no shell or curl: the binary checks its own admin endpoint.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
        CMD ["/rproxy", "-healthcheck", "127.0.0.1:9121"]
ENTRYPOINT ["/rproxy"]
CMD ["-listen", "0.0.0.0:6380", "-upstream", "redis:6379", "-admin", "0.0.0.0:9121"]
