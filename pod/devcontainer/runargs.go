package devcontainer

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/devaipod/devaipod/internal/size"
)

// RunArgs is the podman-settings subset of runArgs. Everything else is
// listed in Unsupported and ignored.
type RunArgs struct {
	CapAdd      []string `json:"capAdd,omitempty"`
	SecurityOpt []string `json:"securityOpt,omitempty"`
	Privileged  bool     `json:"privileged,omitempty"`
	// Devices are --device values as written: HOST[:CONTAINER][:PERMS] or
	// a CDI name (vendor.example/class=name).
	Devices []string          `json:"devices,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// EnvFromHost lists -e NAME without a value: docker copies NAME from
	// the environment it runs in.
	EnvFromHost []string          `json:"envFromHost,omitempty"`
	AddHosts    []string          `json:"addHosts,omitempty"` // "name:ip"
	Memory      string            `json:"memory,omitempty"`   // "512m", "4g"
	CPUs        string            `json:"cpus,omitempty"`     // "1.5"
	PidsLimit   *int64            `json:"pidsLimit,omitempty"`
	ShmSize     string            `json:"shmSize,omitempty"`
	Ulimits     []string          `json:"ulimits,omitempty"` // "nofile=1024:2048"
	Labels      map[string]string `json:"labels,omitempty"`
	// Tmpfs are --tmpfs values: /PATH[:OPTIONS].
	Tmpfs    []string `json:"tmpfs,omitempty"`
	Init     bool     `json:"init,omitempty"`
	Mounts   []Mount  `json:"mounts,omitempty"` // -v, --volume, --mount
	Userns   string   `json:"userns,omitempty"`
	Hostname string   `json:"hostname,omitempty"`
	User     string   `json:"user,omitempty"`
	// Warnings are flags that are understood but deliberately ignored
	// (--name, --network other than host), each a full sentence.
	Warnings []string `json:"warnings,omitempty"`
	// Unsupported lists the other flags, as written up to any "=", in
	// order; they are ignored.
	Unsupported []string `json:"unsupported,omitempty"`
}

// reservedLabelPrefix marks the labels devaipod puts on what it creates.
const reservedLabelPrefix = "io.devaipod."

// RunArgError is a runArgs element that cannot be used.
type RunArgError struct {
	Index int // in the runArgs array
	Msg   string
}

func (e *RunArgError) Error() string { return fmt.Sprintf("runArgs[%d]: %s", e.Index, e.Msg) }

// ParseRunArgs maps runArgs (after Substitute) to RunArgs. Both
// "--flag=value" and "--flag value" are read, and "-e VALUE", "-eVALUE"
// for the short flags. Flags devaipod does not map are listed in
// Unsupported rather than refused, since dropping a docker flag never
// grants a container more than devaipod gives it; an unknown flag without
// "=" takes the next element as its value when that does not start with
// "-". Refused, with a *RunArgError: elements that are not options,
// missing values, malformed values, and --network=host (the container
// shares its pod's network).
func ParseRunArgs(args []string) (RunArgs, error) {
	return parseRunArgs(args, true)
}

type runFlag struct {
	isBool bool
	apply  func(r *RunArgs, name, val string, strict bool) error
}

var (
	cdiName    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*=[A-Za-z0-9._:-]+$`)
	runArgFlag map[string]runFlag
)

func init() {
	list := func(f func(r *RunArgs) *[]string) runFlag {
		return runFlag{apply: func(r *RunArgs, name, val string, strict bool) error {
			if strings.TrimSpace(val) == "" {
				return fmt.Errorf("%s needs a value", name)
			}
			p := f(r)
			*p = append(*p, val)
			return nil
		}}
	}
	size := func(f func(r *RunArgs) *string) runFlag {
		return runFlag{apply: func(r *RunArgs, name, val string, strict bool) error {
			if strict || !strings.Contains(val, "${") {
				if _, err := size.Parse(val); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			*f(r) = val
			return nil
		}}
	}
	str := func(f func(r *RunArgs) *string) runFlag {
		return runFlag{apply: func(r *RunArgs, name, val string, strict bool) error {
			if val == "" {
				return fmt.Errorf("%s needs a value", name)
			}
			*f(r) = val
			return nil
		}}
	}
	boolean := func(f func(r *RunArgs) *bool) runFlag {
		return runFlag{isBool: true, apply: func(r *RunArgs, name, val string, strict bool) error {
			b, err := strconv.ParseBool(val)
			if err != nil {
				return fmt.Errorf("%s=%s: takes true or false", name, val)
			}
			*f(r) = b
			return nil
		}}
	}
	env := runFlag{apply: func(r *RunArgs, name, val string, strict bool) error {
		k, v, hasValue := strings.Cut(val, "=")
		if !validEnvName(k) {
			return fmt.Errorf("%s %q: the variable name must be non-empty, without NUL", name, val)
		}
		if !hasValue {
			r.EnvFromHost = append(r.EnvFromHost, k)
			return nil
		}
		if r.Env == nil {
			r.Env = map[string]string{}
		}
		r.Env[k] = v
		return nil
	}}
	label := runFlag{apply: func(r *RunArgs, name, val string, strict bool) error {
		k, v, _ := strings.Cut(val, "=")
		if k == "" {
			return fmt.Errorf("%s %q: the label needs a name", name, val)
		}
		if strings.HasPrefix(k, reservedLabelPrefix) {
			return fmt.Errorf("%s %q: labels %s* are devaipod's own (it finds its pods by them)", name, val, reservedLabelPrefix)
		}
		if r.Labels == nil {
			r.Labels = map[string]string{}
		}
		r.Labels[k] = v
		return nil
	}}
	// -v and --mount differ in syntax only.
	mountWith := func(parse func(string) (Mount, error)) runFlag {
		return runFlag{apply: func(r *RunArgs, name, val string, strict bool) error {
			m, err := parse(val)
			if err == nil {
				err = checkMount(m, strict)
			}
			if err != nil {
				return fmt.Errorf("%s: %v", name, err)
			}
			r.Mounts = append(r.Mounts, m)
			return nil
		}}
	}
	volume, mount := mountWith(parseVolume), mountWith(ParseMount)
	device := runFlag{apply: func(r *RunArgs, name, val string, strict bool) error {
		host, _, _ := strings.Cut(val, ":")
		if (strict || !strings.Contains(val, "${")) && !strings.HasPrefix(host, "/") && !cdiName.MatchString(val) {
			return fmt.Errorf("%s %q is neither a device path (/dev/...) nor a CDI name (vendor/class=name)", name, val)
		}
		r.Devices = append(r.Devices, val)
		return nil
	}}
	network := runFlag{apply: func(r *RunArgs, name, val string, strict bool) error {
		if val == "host" {
			return fmt.Errorf("%s=host is not supported: devaipod's containers share their pod's network, and the host's network would bypass it", name)
		}
		r.Warnings = append(r.Warnings, fmt.Sprintf("runArgs: %s=%s ignored: the container uses its pod's network", name, val))
		return nil
	}}
	runArgFlag = map[string]runFlag{
		"--cap-add":      list(func(r *RunArgs) *[]string { return &r.CapAdd }),
		"--security-opt": list(func(r *RunArgs) *[]string { return &r.SecurityOpt }),
		"--privileged":   boolean(func(r *RunArgs) *bool { return &r.Privileged }),
		"--init":         boolean(func(r *RunArgs) *bool { return &r.Init }),
		"--device":       device,
		"-e":             env,
		"--env":          env,
		"--add-host": {apply: func(r *RunArgs, name, val string, strict bool) error {
			h, ip, ok := strings.Cut(val, ":")
			if !ok {
				h, ip, ok = strings.Cut(val, "=")
			}
			if !ok || h == "" || ip == "" {
				return fmt.Errorf("%s %q must have the form name:ip", name, val)
			}
			r.AddHosts = append(r.AddHosts, val)
			return nil
		}},
		"-m":       size(func(r *RunArgs) *string { return &r.Memory }),
		"--memory": size(func(r *RunArgs) *string { return &r.Memory }),
		"--cpus": {apply: func(r *RunArgs, name, val string, strict bool) error {
			if !strict && strings.Contains(val, "${") {
				r.CPUs = val
				return nil
			}
			f, err := strconv.ParseFloat(val, 64)
			if err != nil || f <= 0 {
				return fmt.Errorf("%s %q is not a positive number of CPUs", name, val)
			}
			r.CPUs = val
			return nil
		}},
		"--pids-limit": {apply: func(r *RunArgs, name, val string, strict bool) error {
			if !strict && strings.Contains(val, "${") {
				return nil
			}
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < -1 {
				return fmt.Errorf("%s %q is not a number of processes (-1 for no limit)", name, val)
			}
			r.PidsLimit = &n
			return nil
		}},
		"--shm-size": size(func(r *RunArgs) *string { return &r.ShmSize }),
		"--ulimit": {apply: func(r *RunArgs, name, val string, strict bool) error {
			k, v, ok := strings.Cut(val, "=")
			if !ok || k == "" || v == "" {
				return fmt.Errorf("%s %q must have the form name=soft[:hard]", name, val)
			}
			r.Ulimits = append(r.Ulimits, val)
			return nil
		}},
		"-l":      label,
		"--label": label,
		"--tmpfs": {apply: func(r *RunArgs, name, val string, strict bool) error {
			p, opts, _ := strings.Cut(val, ":")
			if strict || !strings.Contains(p, "${") {
				if err := checkContainerPath(p); err != nil {
					return fmt.Errorf("%s path %v", name, err)
				}
			}
			if err := checkTmpfsSize(strings.Split(opts, ","), strict); err != nil {
				return fmt.Errorf("%s %s: %w", name, val, err)
			}
			r.Tmpfs = append(r.Tmpfs, val)
			return nil
		}},
		"--network":  network,
		"--net":      network,
		"-v":         volume,
		"--volume":   volume,
		"--mount":    mount,
		"--userns":   str(func(r *RunArgs) *string { return &r.Userns }),
		"-h":         str(func(r *RunArgs) *string { return &r.Hostname }),
		"--hostname": str(func(r *RunArgs) *string { return &r.Hostname }),
		"-u":         str(func(r *RunArgs) *string { return &r.User }),
		"--user":     str(func(r *RunArgs) *string { return &r.User }),
		"--name": {apply: func(r *RunArgs, name, val string, strict bool) error {
			r.Warnings = append(r.Warnings, fmt.Sprintf("runArgs: %s %s ignored: devaipod names its containers", name, val))
			return nil
		}},
	}
}

// parseRunArgs is ParseRunArgs; without strict, values that still hold
// ${...} variables are not validated (Parse runs it before Substitute).
func parseRunArgs(args []string, strict bool) (RunArgs, error) {
	var r RunArgs
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' || a == "--" {
			return RunArgs{}, &RunArgError{Index: i, Msg: fmt.Sprintf("%q is not an option; runArgs holds docker run options only", a)}
		}
		var name, val string
		var hasValue bool
		if strings.HasPrefix(a, "--") {
			name, val, hasValue = strings.Cut(a, "=")
		} else {
			// -e VALUE, -eVALUE and -e=VALUE, as docker's flag parser reads them.
			name = a[:2]
			if rest := a[2:]; rest != "" {
				val, hasValue = strings.TrimPrefix(rest, "="), true
			}
		}
		f, known := runArgFlag[name]
		if !known {
			r.Unsupported = append(r.Unsupported, name)
			if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
			}
			continue
		}
		idx := i
		if f.isBool {
			if !hasValue {
				val = "true"
			}
		} else if !hasValue {
			if i+1 >= len(args) {
				return RunArgs{}, &RunArgError{Index: i, Msg: fmt.Sprintf("%s needs a value", name)}
			}
			i++
			val = args[i]
		}
		if err := f.apply(&r, name, val, strict); err != nil {
			return RunArgs{}, &RunArgError{Index: idx, Msg: err.Error()}
		}
	}
	return r, nil
}
