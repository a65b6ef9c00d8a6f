# syntax=docker/dockerfile:1
# The image usher/gateway: the plain-HTTP gateway (examples/gateway), a static binary on distroless.
# Build from the repository's root (the context must hold go.mod):
#
#   docker build -f kube/deploy/images/gateway.Dockerfile -t usher/gateway:dev .

# The toolchain, pinned; it builds for the target platform from the build platform's image
# (docker buildx build --platform linux/amd64,linux/arm64 ...), without emulation.
FROM --platform=$BUILDPLATFORM golang:1.26.8 AS build
ARG TARGETOS=linux
ARG TARGETARCH
WORKDIR /src
# The repository is a workspace of modules (go.work): their go.mod and go.sum files first, so
# that the download layer is cached until a requirement changes.
COPY go.mod go.sum go.work go.work.sum ./
COPY examples/go.mod examples/go.sum examples/
COPY kube/go.mod kube/go.sum kube/
COPY bench/go.mod bench/go.sum bench/
COPY proxy/e2e/go.mod proxy/e2e/go.sum proxy/e2e/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags='-s -w' -o /out/gateway ./examples/gateway

# No shell, no package manager, no libc: the binary, CA certificates and a non-root user
# (65532, the uid the manifests run as).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /usr/local/bin/gateway
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gateway"]
