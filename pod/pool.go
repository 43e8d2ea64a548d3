package pod

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// The warm pool. devaipod pool makes pods ahead of time, each one exactly
// what an up of the same request would make (the same plan but for its
// name, its random password and placeholders, and no task), started and
// checked like any other. An up without --name whose plan has the same
// fingerprint claims one instead of making a pod: it creates the pod's claim
// volume, which podman refuses to create twice, so two ups never get the
// same pod, and hands the agent its task.
//
// A pool pod serves one task. Claimed, it is an ordinary pod, deleted with
// devaipod delete; it never goes back to the pool, so nothing of one task
// can reach the next, which gets a pod of its own, as after a fresh up.
//
// The fingerprint covers the whole plan (the commit, the configuration,
// the images, every trusted value and credential, devaipod's version), so a
// pool pod is claimed only by an up that would have made the same pod.

// Pool states of a pod (Summary.Pool).
const (
	PoolIdle    = "idle"
	PoolClaimed = "claimed"
)

// fingerprint identifies the pod in a plan input: the plan built with a
// fixed name, password and salt and no task, and the values of its secrets
// (which the plan's JSON leaves out), hashed.
func fingerprint(in plan.PlanInput) (string, error) {
	in.Name, in.AgentPassword, in.PlaceholderSalt, in.Task, in.Pool = "pool", "pool", "pool", "", ""
	pl, err := plan.Build(in)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(pl); err != nil {
		return "", err
	}
	for _, s := range pl.Secrets {
		fmt.Fprintf(h, "%d:%s%d:%s", len(s.Name), s.Name, len(s.Value), s.Value)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// poolPod is a pod of the pool, as Objects lists it.
type poolPod struct {
	short   string
	key     string
	repo    string
	pr      int
	created time.Time
	claimed bool
	// ready: the pod and every container of it run, and its up finished.
	ready bool
	// busy: the up that makes it still runs (its checks may yet fail and
	// remove it), or a delete removes it, so it is neither claimed nor
	// counted nor deleted.
	busy bool
}

// poolPods finds the pool's pods among objs.
func poolPods(objs []Object) []poolPod {
	byName := map[string]*poolPod{}
	for _, o := range objs {
		if o.Kind == KindPod && o.Labels[plan.LabelPool] != "" {
			pr, _ := strconv.Atoi(o.Labels[plan.LabelPR])
			byName[o.Pod] = &poolPod{short: o.Pod, key: o.Labels[plan.LabelPool], repo: o.Labels[plan.LabelRepo],
				pr: pr, created: o.Created, ready: o.State == "running" && !unfinished(o), busy: podLocked(o.Pod) || RemovalState(o.Pod) != ""}
		}
	}
	for _, o := range objs {
		p := byName[o.Pod]
		switch {
		case p == nil:
		case o.Kind == KindVolume && o.Name == plan.ObjectName(o.Pod, plan.VolumeClaim):
			p.claimed = true
		case o.Kind == KindContainer && o.State != "running":
			p.ready = false
		}
	}
	var out []poolPod
	for _, p := range byName {
		out = append(out, *p)
	}
	// Oldest first: the first made is the first claimed.
	slices.SortFunc(out, func(a, b poolPod) int {
		return cmp.Or(a.created.Compare(b.created), cmp.Compare(a.short, b.short))
	})
	return out
}

// idlePods are the pool's ready, unclaimed pods of fingerprint key.
func idlePods(objs []Object, key string) []poolPod {
	var out []poolPod
	for _, p := range poolPods(objs) {
		if p.key == key && p.ready && !p.claimed && !p.busy {
			out = append(out, p)
		}
	}
	return out
}

// claimPod takes p for one task: it creates p's claim volume, which
// carries the task's label (the pod's own labels were set before it had
// one). ok is false when another up claimed it first. When the create
// fails otherwise (a cancelled context, a dropped connection), the service
// may have made the volume all the same: it is removed again if it is this
// call's (its claim label, a time and a random suffix, tells), so the pod
// goes back to the pool; another up's claim is left alone.
func claimPod(ctx context.Context, eng Engine, short, task string) (ok bool, err error) {
	var nonce [6]byte
	rand.Read(nonce[:])
	claim := time.Now().UTC().Format(time.RFC3339) + "/" + hex.EncodeToString(nonce[:])
	labels := map[string]string{plan.LabelPod: short, plan.LabelClaimed: claim}
	if task != "" {
		labels[plan.LabelTask] = plan.TaskLabel(task)
	}
	name := plan.ObjectName(short, plan.VolumeClaim)
	err = eng.CreateVolume(ctx, plan.VolumeSpec{Name: name, Labels: labels})
	switch {
	case errors.Is(err, ErrExists):
		return false, nil
	case err != nil:
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if objs, lerr := eng.Objects(cctx, short); lerr == nil {
			for _, o := range objs {
				if o.Kind == KindVolume && o.Name == name && o.Labels[plan.LabelClaimed] == claim {
					eng.Remove(cctx, o)
				}
			}
		}
		return false, fmt.Errorf("claim pool pod %s: %w", short, err)
	}
	return true, nil
}

// claimIdle claims the oldest idle pod of fingerprint key; "" when there is
// none.
func claimIdle(ctx context.Context, eng Engine, key, task string) (string, error) {
	objs, err := eng.Objects(ctx, "")
	if err != nil {
		return "", err
	}
	for _, p := range idlePods(objs, key) {
		ok, err := claimPod(ctx, eng, p.short, task)
		if err != nil {
			return "", err
		}
		if ok {
			return p.short, nil
		}
	}
	return "", nil
}

// PoolReport is what FillPool did.
type PoolReport struct {
	// Key is the fingerprint of the pods this request makes.
	Key    string         `json:"key"`
	Source *source.Source `json:"source"`
	// Idle are the pool's idle pods for the request, oldest first.
	Idle []string `json:"idle"`
	// Made are the pods this call made; Removed the idle pods it deleted:
	// made for another commit or configuration of the same repository
	// (stale), or more than size.
	Made    []string `json:"made"`
	Removed []string `json:"removed"`
}

// FillPool makes the pool hold size idle pods for req (its Source and
// settings; Name and Task are ignored), each made as Create makes a pod.
// Idle pods of the same repository made for another fingerprint (an older
// commit, another configuration or devaipod version) are deleted, and so
// are idle pods beyond size. With size 0 it empties the repository's pool.
func FillPool(ctx context.Context, eng Engine, req Request, size int) (*PoolReport, error) {
	req.Name, req.Task, req.DryRun = "", "", false
	req.PoolFill, req.PoolSize = true, size
	rep := &PoolReport{Idle: []string{}, Made: []string{}, Removed: []string{}}
	// Each round makes one pod or says the pool is full; a bound keeps a
	// pod that never counts as idle from looping for ever.
	for range size + 1 {
		res, err := Create(ctx, eng, req)
		if err != nil {
			return rep, err
		}
		rep.Key, rep.Source = res.PoolKey, res.Source
		if res.Plan == nil {
			break
		}
		rep.Made = append(rep.Made, res.Plan.Name)
	}
	objs, err := eng.Objects(ctx, "")
	if err != nil {
		return rep, err
	}
	kept := 0
	var errs []error
	for _, p := range poolPods(objs) {
		if p.claimed || p.busy || !SameSource(p.repo, p.pr, rep.Source) {
			continue
		}
		if p.key == rep.Key && p.ready && kept < size {
			kept++
			rep.Idle = append(rep.Idle, p.short)
			continue
		}
		// Claim before deleting, so that no up takes a pod being deleted.
		ok, err := claimPod(ctx, eng, p.short, "")
		if err != nil || !ok {
			errs = append(errs, err)
			continue
		}
		if _, err := Delete(ctx, eng, p.short, false); err != nil {
			errs = append(errs, fmt.Errorf("remove pool pod %s: %w", p.short, err))
			continue
		}
		rep.Removed = append(rep.Removed, p.short)
	}
	return rep, errors.Join(errs...)
}
