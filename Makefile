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

# make install: where, as the GNU conventions name it. DESTDIR is prepended
# to every path (staging for a package).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
DESTDIR ?=
INSTALL ?= install

# Generated files: the man pages and the shell completions (make docs).
OUT := _output
COMPLETIONS := $(OUT)/completions/devaipod.bash $(OUT)/completions/_devaipod $(OUT)/completions/devaipod.fish
# The man pages carry the date of the last commit, not the build's.
ifeq ($(origin SOURCE_DATE_EPOCH),undefined)
SOURCE_DATE_EPOCH := $(shell git log -1 --format=%ct 2>/dev/null || date +%s)
endif
export SOURCE_DATE_EPOCH

.PHONY: all build binaries docs images install uninstall test unit bench bench-scale fuzz fmt vet clean demo unsetup

all: build

build: binaries
	@$(MAKE) --no-print-directory docs

# A first build downloads the Go modules and compiles podman's client:
# minutes without output, so hack/progress.sh says that it still runs.
binaries:
	@hack/progress.sh "building bin/devaipod (a first build downloads Go modules: minutes)" \
		go build -trimpath -ldflags "$(LDFLAGS)" -o bin/devaipod ./cmd/devaipod
	@hack/progress.sh "building bin/devaipod-helper" go build -trimpath -ldflags "$(IMAGE_LDFLAGS)" -o bin/devaipod-helper ./cmd/devaipod-helper
	@hack/progress.sh "building bin/devaipod-gator" go build -trimpath -ldflags "$(IMAGE_LDFLAGS)" -o bin/devaipod-gator ./cmd/devaipod-gator

# The CLI, built here only when missing (make install after make images).
bin/devaipod:
	go build -trimpath -ldflags "$(LDFLAGS)" -o $@ ./cmd/devaipod

# docs regenerates the man pages and completions when bin/devaipod is newer
# than them (make build runs it; go build leaves an unchanged binary alone).
# The man pages come from a second build of the CLI with the tag genman,
# whose hidden `__gen-man DIR` runs cobra/doc: the CLI does not link it.
docs: $(OUT)/man/devaipod.1 $(COMPLETIONS)

$(OUT)/man/devaipod.1: bin/devaipod
	go build -trimpath -tags=$(subst $(space),$(comma),$(BUILDTAGS) genman) -ldflags "$(LDFLAGS)" -o $(OUT)/devaipod-genman ./cmd/devaipod
	rm -rf $(OUT)/man.tmp && mkdir -p $(OUT)/man.tmp
	$(OUT)/devaipod-genman __gen-man $(OUT)/man.tmp
	rm -rf $(OUT)/man && mv $(OUT)/man.tmp $(OUT)/man

$(OUT)/completions/devaipod.bash: bin/devaipod
	@mkdir -p $(@D)
	bin/devaipod completion bash >$@.tmp && mv $@.tmp $@
$(OUT)/completions/_devaipod: bin/devaipod
	@mkdir -p $(@D)
	bin/devaipod completion zsh >$@.tmp && mv $@.tmp $@
$(OUT)/completions/devaipod.fish: bin/devaipod
	@mkdir -p $(@D)
	bin/devaipod completion fish >$@.tmp && mv $@.tmp $@

# install puts the CLI, its man pages and its shell completions under
# PREFIX. The helper image is not installed: each user who runs devaipod
# builds the images into their own podman storage with `make images` in
# this tree (up and doctor compare the helper image's version with the
# CLI's). Typical: make build && sudo make install, then make images as
# each user.
install: bin/devaipod docs
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(DATADIR)/bash-completion/completions $(DESTDIR)$(DATADIR)/zsh/site-functions \
		$(DESTDIR)$(DATADIR)/fish/vendor_completions.d
	$(INSTALL) -m 0755 bin/devaipod $(DESTDIR)$(BINDIR)/devaipod
	$(INSTALL) -m 0644 $(OUT)/man/*.1 $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -m 0644 $(OUT)/completions/devaipod.bash $(DESTDIR)$(DATADIR)/bash-completion/completions/devaipod
	$(INSTALL) -m 0644 $(OUT)/completions/_devaipod $(DESTDIR)$(DATADIR)/zsh/site-functions/_devaipod
	$(INSTALL) -m 0644 $(OUT)/completions/devaipod.fish $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/devaipod.fish

# uninstall removes what install put there (the images stay: `podman rmi
# localhost/devaipod-helper localhost/devaipod-default` as each user).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/devaipod \
		$(DESTDIR)$(MANDIR)/man1/devaipod.1 $(DESTDIR)$(MANDIR)/man1/devaipod-*.1 \
		$(DESTDIR)$(DATADIR)/bash-completion/completions/devaipod \
		$(DESTDIR)$(DATADIR)/zsh/site-functions/_devaipod \
		$(DESTDIR)$(DATADIR)/fish/vendor_completions.d/devaipod.fish

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
	hack/as-test-user hack/install-devcontainer-cli.sh /tmp/devaipod-test-devcontainer-cli
	@# The output as it comes, then the slowest tests; the status is go test's.
	@status=$$(mktemp); \
	{ DEVAIPOD_BIN=$(CURDIR)/bin/devaipod DEVAIPOD_OPENCODE_BIN=/tmp/devaipod-test-opencode/opencode \
		DEVAIPOD_DEVCONTAINER_CLI_BIN=/tmp/devaipod-test-devcontainer-cli/node_modules/.bin/devcontainer \
		go test -v -count=1 -timeout 60m -exec $(CURDIR)/hack/as-test-user ./... 2>&1; echo $$? >"$$status"; } | hack/test-report.sh; \
	code=$$(cat "$$status"); rm -f "$$status"; exit $$code
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
# Then the gator's object reader against go-git's (docs/benchmarks-gator.md).
# It needs the images (make images), hyperfine and, for the proxy, squid.
# As root, bench.sh measures as the test user and writes the page as root.
bench: build
	hack/bench.sh
	hack/bench-proxy.sh
	hack/bench-gator.sh

# bench-scale starts 100 `devaipod up` of a stand-in agent at once, then
# deletes them all at once, and writes docs/benchmarks-scale.md (successes,
# wall time, peak kernel key use, memory). DEVAIPOD_SCALE_PODS=N for another
# count. Past about 40 pods it needs the kernel's per-user key quota raised
# (hack/setup-host.sh does it as root; devaipod doctor --pods N says how).
bench-scale: build
	hack/bench-scale.sh

# demo is the README's first command: up of examples/hello on the default
# image, then how to get in.
demo:
	hack/demo.sh

# unsetup undoes what make demo or make test changed on the machine as
# root (hack/setup-host.sh records each change): packages, the test user
# with its pods, config files, sysctls, modes, mounts.
unsetup:
	hack/unsetup-host.sh

# fuzz runs every fuzz target for FUZZTIME each (go test -fuzz takes one
# target at a time).
FUZZTIME ?= 30s
FUZZ_TARGETS := ./pod/config:FuzzParseConfig ./cmd/devaipod-helper:FuzzGitConfig ./pod:FuzzParseDockerfileBases ./pod/plan:FuzzNormalizeName ./pod/source:FuzzResolveURL ./pod/source:FuzzParsePRURL ./pod/source:FuzzCheckBundle ./internal/gitpack:FuzzPatch ./internal/gitpack:FuzzReadEntry ./gator:FuzzObjectReader ./proxy:FuzzKeepRecord ./proxy:FuzzPlainRequest ./proxy:FuzzPlainResponse ./proxy:FuzzAnswerMask ./pod/devcontainer:FuzzParse ./cmd/devaipod-helper:FuzzParseBridge ./proxy/rule:FuzzParseRule ./proxy/rule:FuzzMatch ./gator/policy:FuzzParseScope ./internal/endpoint:FuzzParse ./internal/size:FuzzParse
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $$t for $(FUZZTIME)"; \
		out=$$(go test "$${t%%:*}" -run '^$$' -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME) 2>&1); rc=$$?; \
		printf '%s\n' "$$out" | tail -n 3; \
		[ $$rc -eq 0 ] || { printf '%s\n' "$$out"; exit 1; }; \
		case "$$out" in *"no fuzz tests to fuzz"*) echo "fuzz: $$t names no fuzz target"; exit 1;; esac; \
	done
