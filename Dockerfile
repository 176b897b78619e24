# syntax=docker/dockerfile:1
# One image recipe for Sundial's four services and schedctl; the SERVICE
# build argument picks which (api, prefetcher, relay, worker, schedctl).
# docker-compose.yml builds each service from the `service` target and
# schedctl from the `schedctl` target:
#
#   docker build --build-arg SERVICE=api --target service -t sundial-api .
#   docker build --build-arg SERVICE=schedctl --target schedctl -t sundial-schedctl .
#
# Stage 1 compiles a static binary in the Go workspace; the final stages are
# a small Alpine image (about 10 MB with the binary's 20-30 MB on top;
# busybox provides the wget of the compose healthchecks and the sleep of the
# Helm chart's preStop hook) running it as the non-root user 10001.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# The whole workspace: a service imports pkg and proto through go.work. Module
# downloads and build results persist in cache mounts between builds. (No
# separate `go mod download` layer: in workspace mode it fetches every module
# in the graph, including large ones no service links.)
COPY . .
ARG SERVICE
RUN case "${SERVICE}" in \
      api|prefetcher|relay|worker) echo "./services/${SERVICE}" >/tmp/pkg ;; \
      schedctl) echo ./cmd/schedctl >/tmp/pkg ;; \
      *) echo "build with --build-arg SERVICE=api|prefetcher|relay|worker|schedctl" >&2; exit 1 ;; \
    esac
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags="-s -w" -o /out/sundial "$(cat /tmp/pkg)"

FROM alpine:3.20 AS runtime
RUN apk add --no-cache ca-certificates tzdata && adduser -D -H -u 10001 sundial
USER 10001
LABEL org.opencontainers.image.source="https://github.com/sundialhq/sundial"

# The four services: /usr/local/bin/sundial, admin port per service.
FROM runtime AS service
ARG SERVICE
COPY --from=build /out/sundial /usr/local/bin/sundial
LABEL org.opencontainers.image.title="sundial-${SERVICE}"
ENTRYPOINT ["/usr/local/bin/sundial"]

# The command-line client, for admin Jobs and debugging pods.
FROM runtime AS schedctl
COPY --from=build /out/sundial /usr/local/bin/schedctl
LABEL org.opencontainers.image.title="sundial-schedctl"
ENTRYPOINT ["/usr/local/bin/schedctl"]
