package devcontainer

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func int64p(n int64) *int64 { return &n }

func TestParseRunArgs(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want RunArgs
	}{
		{"empty", nil, RunArgs{}},
		{"equals and separate values", []string{"--cap-add=SYS_PTRACE", "--cap-add", "NET_ADMIN", "--security-opt", "seccomp=unconfined", "--security-opt=label=disable"},
			RunArgs{CapAdd: []string{"SYS_PTRACE", "NET_ADMIN"}, SecurityOpt: []string{"seccomp=unconfined", "label=disable"}}},
		{"booleans", []string{"--privileged", "--init=true"}, RunArgs{Privileged: true, Init: true}},
		{"boolean false", []string{"--privileged=false", "--init=0"}, RunArgs{}},
		{"devices", []string{"--device=/dev/fuse", "--device", "/dev/kvm:/dev/kvm:rwm", "--device", "nvidia.com/gpu=all"},
			RunArgs{Devices: []string{"/dev/fuse", "/dev/kvm:/dev/kvm:rwm", "nvidia.com/gpu=all"}}},
		{"env forms", []string{"-e", "A=1", "-eB=2", "-e=C=3", "--env", "D=x=y", "--env=E=", "-e", "FROM_HOST"},
			RunArgs{Env: map[string]string{"A": "1", "B": "2", "C": "3", "D": "x=y", "E": ""}, EnvFromHost: []string{"FROM_HOST"}}},
		{"resources", []string{"-m", "4g", "--memory=512MiB", "--cpus", "0.5", "--pids-limit=-1", "--shm-size", "1g", "--ulimit", "nofile=1024:2048", "--ulimit=nproc=64"},
			RunArgs{Memory: "512MiB", CPUs: "0.5", PidsLimit: int64p(-1), ShmSize: "1g", Ulimits: []string{"nofile=1024:2048", "nproc=64"}}},
		{"hosts labels tmpfs", []string{"--add-host", "db.example:192.0.2.5", "--add-host=cache.example=192.0.2.6", "-l", "a=b", "--label", "flag", "--tmpfs", "/run:size=64m", "--tmpfs=/cache"},
			RunArgs{AddHosts: []string{"db.example:192.0.2.5", "cache.example=192.0.2.6"}, Labels: map[string]string{"a": "b", "flag": ""}, Tmpfs: []string{"/run:size=64m", "/cache"}}},
		{"volumes and mounts", []string{"-v", "/srv:/srv:ro,z", "--volume=data:/data", "-v/anon", "--mount", "type=bind,source=/a,target=/b,readonly", "--mount=type=tmpfs,target=/t"},
			RunArgs{Mounts: []Mount{
				{Type: MountBind, Source: "/srv", Target: "/srv", ReadOnly: true, Options: []string{"z"}},
				{Type: MountVolume, Source: "data", Target: "/data"},
				{Type: MountVolume, Target: "/anon"},
				{Type: MountBind, Source: "/a", Target: "/b", ReadOnly: true},
				{Type: MountTmpfs, Target: "/t"},
			}}},
		{"identity", []string{"--userns=keep-id", "--hostname", "box", "-u", "1000:1000"},
			RunArgs{Userns: "keep-id", Hostname: "box", User: "1000:1000"}},
		{"short hostname", []string{"-h", "box"}, RunArgs{Hostname: "box"}},
		{"ignored with a warning", []string{"--name", "mine", "--network=bridge", "--net", "none"},
			RunArgs{Warnings: []string{
				"runArgs: --name mine ignored: devaipod names its containers",
				"runArgs: --network=bridge ignored: the container uses its pod's network",
				"runArgs: --net=none ignored: the container uses its pod's network",
			}}},
		{"unsupported flags", []string{"--gpus", "all", "--ipc=host", "-it", "--rm", "--cap-drop", "ALL", "-p", "8080:80", "--read-only", "--init"},
			RunArgs{Init: true, Unsupported: []string{"--gpus", "--ipc", "-i", "--rm", "--cap-drop", "-p", "--read-only"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRunArgs(tt.args)
			if err != nil {
				t.Fatalf("ParseRunArgs(%q): %v", tt.args, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(tt.want)
				t.Errorf("ParseRunArgs(%q)\n got %s\nwant %s", tt.args, g, w)
			}
		})
	}
}

func TestParseRunArgsErrors(t *testing.T) {
	tests := []struct {
		args  []string
		index int
		msg   string
	}{
		{[]string{"ubuntu"}, 0, `"ubuntu" is not an option`},
		{[]string{"--init", ""}, 1, `"" is not an option`},
		{[]string{"--", "x"}, 0, `"--" is not an option`},
		{[]string{"--privileged", "false"}, 1, `"false" is not an option`},
		{[]string{"--cap-add"}, 0, "--cap-add needs a value"},
		{[]string{"--cap-add="}, 0, "--cap-add needs a value"},
		{[]string{"--network=host"}, 0, "--network=host is not supported"},
		{[]string{"--init", "--net", "host"}, 1, "--net=host is not supported"},
		{[]string{"--privileged=maybe"}, 0, "takes true or false"},
		{[]string{"-m", "lots"}, 0, `-m: size "lots": not a size`},
		{[]string{"--cpus=0"}, 0, "is not a positive number of CPUs"},
		{[]string{"--cpus=many"}, 0, "is not a positive number of CPUs"},
		{[]string{"--pids-limit", "-5"}, 0, "is not a number of processes"},
		{[]string{"--shm-size=1q"}, 0, `--shm-size: size "1q": not a size`},
		{[]string{"--ulimit", "nofile"}, 0, "must have the form name=soft[:hard]"},
		{[]string{"--add-host", "nohost"}, 0, "must have the form name:ip"},
		{[]string{"-l", "=v"}, 0, "the label needs a name"},
		{[]string{"--label=io.devaipod.pod=other"}, 0, "labels io.devaipod.* are devaipod's own"},
		{[]string{"-e", "=v"}, 0, "the variable name must be non-empty"},
		{[]string{"--tmpfs", "relative"}, 0, "must be an absolute path"},
		{[]string{"--tmpfs", "/t:size=0"}, 0, `size: size "0": must be more than zero`},
		{[]string{"--tmpfs=/t:rw,size=99999999999g"}, 0, `size "99999999999g": too large`},
		{[]string{"--mount", "type=tmpfs,target=/t,tmpfs-size=-1m"}, 0, `tmpfs-size: size "-1m": not a size`},
		{[]string{"--device", "fuse"}, 0, "neither a device path"},
		{[]string{"-v", "/a:b"}, 0, `target "b" must be an absolute path`},
		{[]string{"-v", "/a:/b:ro:extra"}, 0, "is not a volume"},
		{[]string{"-v", "./rel:/b"}, 0, "is not a volume name"},
		{[]string{"--mount", "type=bind,target=/x"}, 0, "a bind mount needs a source"},
		{[]string{"--mount", "type=bind,source=/a,target=/../etc"}, 0, `must not contain ".."`},
		{[]string{"--userns"}, 0, "--userns needs a value"},
		{[]string{"--hostname="}, 0, "--hostname needs a value"},
	}
	for _, tt := range tests {
		_, err := ParseRunArgs(tt.args)
		var re *RunArgError
		if !errors.As(err, &re) {
			t.Errorf("ParseRunArgs(%q) = %v, want a *RunArgError", tt.args, err)
			continue
		}
		if re.Index != tt.index || !strings.Contains(re.Msg, tt.msg) {
			t.Errorf("ParseRunArgs(%q) = index %d %q, want index %d containing %q", tt.args, re.Index, re.Msg, tt.index, tt.msg)
		}
	}
}

// Values that still hold variables pass at parse time and are checked by
// ParseRunArgs (strict) once substituted.
func TestParseRunArgsVariables(t *testing.T) {
	args := []string{"--memory=${localEnv:MEM}", "--tmpfs", "${containerWorkspaceFolder}/t", "-v", "${localWorkspaceFolder}:/src"}
	if _, err := parseRunArgs(args, false); err != nil {
		t.Fatalf("lenient: %v", err)
	}
	if _, err := ParseRunArgs(args); err == nil {
		t.Fatal("strict ParseRunArgs accepted unsubstituted values")
	}
}

func TestParseMount(t *testing.T) {
	tests := []struct {
		in   string
		want Mount
	}{
		{"type=bind,source=/a,target=/b", Mount{Type: MountBind, Source: "/a", Target: "/b"}},
		{"src=vol,dst=/v", Mount{Type: MountVolume, Source: "vol", Target: "/v"}},
		{"destination=/v,ro", Mount{Type: MountVolume, Target: "/v", ReadOnly: true}},
		{"type=bind,source=/a,target=/b,readonly=1,consistency=cached,,", Mount{Type: MountBind, Source: "/a", Target: "/b", ReadOnly: true, Options: []string{"consistency=cached"}}},
		{`type=bind,"source=/a,b",target=/c`, Mount{Type: MountBind, Source: "/a,b", Target: "/c"}},
		{"Type=tmpfs,Target=/t,tmpfs-size=1m", Mount{Type: MountTmpfs, Target: "/t", Options: []string{"tmpfs-size=1m"}}},
	}
	for _, tt := range tests {
		got, err := ParseMount(tt.in)
		if err != nil {
			t.Errorf("ParseMount(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseMount(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	for _, bad := range []string{"", "  ", "type=bind,source=\"/a,target=/b", "target=/a\ntarget=/b", "ro=perhaps,target=/x"} {
		if m, err := ParseMount(bad); err == nil {
			t.Errorf("ParseMount(%q) = %+v, want an error", bad, m)
		}
	}
}
