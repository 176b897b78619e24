# syntax=docker/dockerfile:1
# One image recipe for all four Sundial services; the SERVICE build argument
# picks which (api, prefetcher, relay, worker). docker-compose.yml builds each
# service from the `service` target:
#
#   docker build --build-arg SERVICE=api --target service -t sundial-api .
#
# Stage 1 compiles a static binary in the Go workspace; stage 2 is a small
# Alpine image (busybox wget serves the compose healthchecks) running it as a
# non-root user.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# The whole workspace: a service imports pkg and proto through go.work. Module
# downloads and build results persist in cache mounts between builds. (No
# separate `go mod download` layer: in workspace mode it fetches every module
# in the graph, including large ones no service links.)
COPY . .
ARG SERVICE
RUN test -n "${SERVICE}" -a -f "services/${SERVICE}/main.go" || { echo "build with --build-arg SERVICE=api|prefetcher|relay|worker" >&2; exit 1; }
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags="-s -w" -o /out/sundial "./services/${SERVICE}"

FROM alpine:3.20 AS service
ARG SERVICE
RUN apk add --no-cache ca-certificates tzdata && adduser -D -H -u 10001 sundial
COPY --from=build /out/sundial /usr/local/bin/sundial
USER 10001
LABEL org.opencontainers.image.title="sundial-${SERVICE}" \
      org.opencontainers.image.source="https://github.com/sundialhq/sundial"
ENTRYPOINT ["/usr/local/bin/sundial"]
