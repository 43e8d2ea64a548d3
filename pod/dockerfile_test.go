package pod

import (
	"slices"
	"testing"
)

func TestParseDockerfileBases(t *testing.T) {
	const dockerfile = `# syntax=docker/dockerfile:1
ARG BASE=registry.example.test/team/base
ARG TAG="1.2"
ARG UNSET
FROM --platform=$BUILDPLATFORM ${BASE}:${TAG} AS build
ARG TAG=ignored-after-from
RUN make
from golang:1.23 as Tools
FROM build
FROM tools AS final
FROM scratch
FROM registry.example.test/x:${UNSET}
FROM ${NOPE:-debian:12}
FROM \
  busybox:1
COPY --from=alpine:3 / /
COPY --from=build /x /y
COPY --from=0 /x /y
`
	got := parseDockerfileBases([]byte(dockerfile), map[string]string{"TAG": "2.0"})
	want := []string{"registry.example.test/team/base:2.0", "golang:1.23", "debian:12", "busybox:1", "alpine:3"}
	if !slices.Equal(got, want) {
		t.Errorf("bases = %q; want %q", got, want)
	}
}

func FuzzParseDockerfileBases(f *testing.F) {
	f.Add([]byte("ARG A=b\nFROM ${A}:1 AS x\nFROM x\n"), "A", "c")
	f.Fuzz(func(t *testing.T, data []byte, k, v string) {
		for _, b := range parseDockerfileBases(data, map[string]string{k: v}) {
			if b == "" {
				t.Fatalf("an empty base from %q", data)
			}
		}
	})
}
