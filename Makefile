# devaipod build, images, tests and benchmarks.
#
# The podman bindings need these tags on every go invocation (build, test,
# vet): without them the build pulls in gpgme and btrfs cgo code.
# Go's usual install location, in case the caller's PATH lacks it.
export PATH := $(PATH):/usr/local/go/bin
comma := ,
space := $(subst ,, )
BUILDTAGS := remote exclude_graphdriver_btrfs containers_image_openpgp
export CGO_ENABLED := 0
export GOFLAGS := -tags=$(subst $(space),$(comma),$(BUILDTAGS)) -buildvcs=false

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/devaipod/devaipod/pod/plan.Version=$(VERSION)
# The binaries of the helper image (devaipod-helper, devaipod-gator) keep
# their version in main.Version.
IMAGE_LDFLAGS := -s -w -X main.Version=$(VERSION)

.PHONY: all build images test unit bench fuzz fmt vet clean demo

all: build

build:
	go build -trimpath -ldflags "$(LDFLAGS)" -o bin/devaipod ./cmd/devaipod
	go build -trimpath -ldflags "$(IMAGE_LDFLAGS)" -o bin/devaipod-helper ./cmd/devaipod-helper
	go build -trimpath -ldflags "$(IMAGE_LDFLAGS)" -o bin/devaipod-gator ./cmd/devaipod-gator

# The helper image's binaries, built here only when missing: make build
# refreshes them, and make test runs `make images` as a user who should not
# rebuild what root built.
bin/devaipod-helper bin/devaipod-gator:
	go build -trimpath -ldflags "$(IMAGE_LDFLAGS)" -o $@ ./cmd/$(@F)

# images builds every image devaipod uses into the calling user's podman
# storage: the helper image (FROM scratch: devaipod-helper and
# devaipod-gator) and the default dev image (a Debian rootfs made from Debian
# packages; no container registry involved).
images: bin/devaipod-helper bin/devaipod-gator
	hack/build-images.sh

# test is the one command CI runs. As root on a bare machine it installs
# podman, sets up rootless podman for the unprivileged user devaipod-test and
# runs every test binary as that user; as a normal user with podman it just
# runs the tests.
test:
	hack/setup-host.sh
	$(MAKE) build
	hack/as-test-user $(MAKE) images
	hack/as-test-user hack/extract-opencode.sh /tmp/devaipod-test-opencode/opencode
	DEVAIPOD_BIN=$(CURDIR)/bin/devaipod DEVAIPOD_OPENCODE_BIN=/tmp/devaipod-test-opencode/opencode \
		go test -v -count=1 -timeout 60m -exec $(CURDIR)/hack/as-test-user ./...
	@# Resource limits hold only on rootful podman here (rootless on cgroup v1 ignores them): as
	@# root, prove them there too. A non-root run says so instead.
	@if [ "$$(id -u)" -eq 0 ]; then \
		hack/root-images.sh && \
		DEVAIPOD_BIN=$(CURDIR)/bin/devaipod DEVAIPOD_E2E_MODE=rootful go test -v -count=1 -timeout 10m -run 'TestE2EDoctorAndLimits' ./cmd/devaipod; \
	else \
		echo "make test: not root, so the rootful pass (limits enforced) did not run"; \
	fi

unit:
	go test -count=1 -short ./...

vet:
	go vet ./...

fmt:
	gofmt -l -w .

clean:
	rm -rf bin _output

# bench times devaipod's up and delete against the same pod built by a
# script of plain podman CLI commands (the Rust devaipod's way), writing
# docs/benchmarks.md, then the egress proxy against squid and no proxy,
# writing docs/benchmarks-proxy.md (SOAK=30s for a quick run; default 10m).
# It needs the images (make images), hyperfine and, for the proxy, squid.
# As root, bench.sh measures as the test user and writes the page as root.
bench: build
	hack/bench.sh
	hack/bench-proxy.sh

# demo is the README's first command: up of examples/hello on the default
# image, then how to get in.
demo:
	hack/demo.sh

# fuzz runs every fuzz target for FUZZTIME each (go test -fuzz takes one
# target at a time).
FUZZTIME ?= 30s
FUZZ_TARGETS := ./pod/config:FuzzParseConfig ./pod/plan:FuzzNormalizeName ./pod/source:FuzzResolveURL ./pod/source:FuzzParsePRURL ./pod/devcontainer:FuzzParse ./cmd/devaipod-helper:FuzzParseBridge ./proxy/rule:FuzzParseRule ./proxy/rule:FuzzMatch ./gator/policy:FuzzParseScope ./internal/endpoint:FuzzParse ./internal/size:FuzzParse
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $$t for $(FUZZTIME)"; \
		go test "$${t%%:*}" -run '^$$' -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME) || exit 1; \
	done
