package pod

import (
	"slices"
	"strings"
	"testing"
)

func TestParseDockerfileBases(t *testing.T) {
	const dockerfile = `# syntax=docker/dockerfile:1
ARG BASE=registry.example.test/team/base
ARG TAG="1.2"
ARG UNSET
ARG CHAIN=$BASE-chained
ARG DECOY=docker.io/x/decoy
FROM ${DECOY:+registry.example.test/priv:1}
FROM ${CHAIN}:3
FROM --platform=$BUILDPLATFORM ${BASE}:${TAG} AS build
ARG TAG=ignored-after-from
RUN make
from golang:1.23 as Tools
FROM build
FROM tools AS final
FROM scratch
FROM registry.example.test/x:${UNSET}
FROM ${NOPE:-debian:12}
ARG LATE=not-global
FROM ${TAG:+registry.example.test/alt}:${TAG}
FROM \
  busybox:1
COPY --from=alpine:3 / /
COPY --from=build /x /y
COPY --from=0 /x /y
RUN --mount=type=bind,from=registry.example.test/tools:1,target=/t make
RUN --mount=type=cache,target=/c make
FROM busybox:1 AS shadow
ARG BASE=registry.example.test/stage-only:1
COPY --from=$BASE /x /y
ARG TAG
COPY --from=registry.example.test/team/base:${TAG} /x /y
`
	got, unknown := parseDockerfileBases([]byte(dockerfile), map[string]string{"TAG": "2.0"})
	want := []string{"registry.example.test/priv:1", "registry.example.test/team/base-chained:3", "registry.example.test/team/base:2.0", "golang:1.23",
		"debian:12", "registry.example.test/alt:2.0", "busybox:1", "alpine:3", "registry.example.test/tools:1",
		"busybox:1", "registry.example.test/stage-only:1", "registry.example.test/team/base:2.0"}
	if !slices.Equal(got, want) {
		t.Errorf("bases = %q; want %q", got, want)
	}
	if want := []string{"registry.example.test/x:${UNSET}"}; !slices.Equal(unknown, want) {
		t.Errorf("unknown = %q; want %q", unknown, want)
	}
}

func TestParseDockerfileBasesRefuses(t *testing.T) {
	for _, dockerfile := range []string{
		"# syntax=docker/dockerfile:1\n# escape=`\nFROM busybox\nRUN echo `\nFROM localhost/secret:1\n",
		"FROM busybox AS a\nONBUILD COPY --from=localhost/secret:1 / /\nFROM a\n",
	} {
		if _, unknown := parseDockerfileBases([]byte(dockerfile), nil); len(unknown) == 0 {
			t.Errorf("%q: nothing unknown", dockerfile)
		}
	}
}

func FuzzParseDockerfileBases(f *testing.F) {
	f.Add([]byte("ARG A=b\nFROM ${A}:1 AS x\nFROM x\n"), "A", "c")
	f.Fuzz(func(t *testing.T, data []byte, k, v string) {
		bases, unknown := parseDockerfileBases(data, map[string]string{k: v})
		for _, b := range bases {
			if b == "" || strings.Contains(b, "$") {
				t.Fatalf("base %q from %q", b, data)
			}
		}
		for _, u := range unknown {
			if !strings.Contains(u, "$") {
				t.Fatalf("unknown %q from %q holds no variable", u, data)
			}
		}
	})
}
