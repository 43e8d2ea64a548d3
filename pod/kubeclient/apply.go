package kubeclient

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/devaipod/devaipod/pod/plan"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

// Ref names one object devaipod applied.
type Ref struct {
	Kind string `json:"kind"` // Kubernetes' kind: Pod, Secret...
	Name string `json:"name"`
}

func (r Ref) String() string { return r.Kind + "/" + r.Name }

// applyOrder is the order objects are applied in: what a Pod refers to
// exists before it, and the NetworkPolicy that confines a Pod before the
// Pod (a Pod applied first could reach out until its policy came). Kinds
// not listed are refused.
var applyOrder = []string{"Secret", "ConfigMap", "PersistentVolumeClaim", "NetworkPolicy", "Service", "Pod"}

// manifest is one object ready for server-side apply.
type manifest struct {
	ref  Ref
	data []byte // JSON with apiVersion and kind
}

// ApplyError says which object the cluster refused; what was applied
// before it was deleted again (Cleanup says whether that failed).
type ApplyError struct {
	Ref     Ref
	Err     error
	Cleanup error
}

func (e *ApplyError) Error() string {
	msg := fmt.Sprintf("apply %s: %v", e.Ref, e.Err)
	if e.Cleanup != nil {
		msg += fmt.Sprintf(" (and removing what was applied failed: %v)", e.Cleanup)
	}
	return msg
}

func (e *ApplyError) Unwrap() error { return e.Err }

// Apply applies objs with server-side apply (field manager "devaipod",
// conflicts forced: devaipod owns its objects) in dependency order:
// Secrets, ConfigMaps and PersistentVolumeClaims, then NetworkPolicies,
// then Pods. Every object must carry the io.devaipod.pod label, by which
// delete finds it. Applying the same objects again changes nothing.
//
// It is all or nothing: when the cluster refuses an object, or ctx ends,
// it deletes what it applied (Pods first, and NetworkPolicies only once
// their Pods are gone) and returns an *ApplyError. progress, when set,
// hears about each object.
func (c *Client) Apply(ctx context.Context, objs []runtime.Object, progress func(string)) ([]Ref, error) {
	ms, err := c.manifests(objs)
	if err != nil {
		return nil, err
	}
	var applied []Ref
	for _, m := range ms {
		if progress != nil {
			progress("applying " + m.ref.String())
		}
		// Recorded before the call: a call cut short by ctx may still
		// have made it.
		applied = append(applied, m.ref)
		err := ctx.Err()
		if err == nil {
			err = c.applyOne(ctx, m)
		}
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			return nil, &ApplyError{Ref: m.ref, Err: err, Cleanup: c.deleteRefs(cctx, applied)}
		}
	}
	return applied, nil
}

// Refs names objs in the order Apply applies them (for a dry run).
func Refs(objs []runtime.Object) ([]Ref, error) {
	ms, err := (&Client{}).manifests(objs)
	var refs []Ref
	for _, m := range ms {
		refs = append(refs, m.ref)
	}
	return refs, err
}

// manifests checks objs and turns them into JSON in apply order.
func (c *Client) manifests(objs []runtime.Object) ([]manifest, error) {
	var ms []manifest
	for _, obj := range objs {
		obj = obj.DeepCopyObject()
		gvk := obj.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" {
			kinds, _, err := scheme.Scheme.ObjectKinds(obj)
			if err != nil || len(kinds) == 0 {
				return nil, fmt.Errorf("object of type %T: not a Kubernetes object devaipod knows", obj)
			}
			gvk = kinds[0]
			obj.GetObjectKind().SetGroupVersionKind(gvk)
		}
		acc, err := meta.Accessor(obj)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
		}
		ref := Ref{Kind: gvk.Kind, Name: acc.GetName()}
		if !slices.Contains(applyOrder, ref.Kind) {
			return nil, fmt.Errorf("%s: devaipod does not apply objects of kind %s", ref, ref.Kind)
		}
		if ref.Name == "" {
			return nil, fmt.Errorf("a %s without a name", ref.Kind)
		}
		if acc.GetLabels()[plan.LabelPod] == "" {
			return nil, fmt.Errorf("%s has no %s label: delete could not find it", ref, plan.LabelPod)
		}
		switch ns := acc.GetNamespace(); {
		case ns == "":
			acc.SetNamespace(c.Namespace)
		case c.Namespace == "" || ns == c.Namespace: // "": Refs
		default:
			return nil, fmt.Errorf("%s is for namespace %s, not %s", ref, ns, c.Namespace)
		}
		// Server-side apply refuses these set by a client.
		acc.SetResourceVersion("")
		acc.SetManagedFields(nil)
		data, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		ms = append(ms, manifest{ref: ref, data: data})
	}
	slices.SortStableFunc(ms, func(a, b manifest) int {
		return slices.Index(applyOrder, a.ref.Kind) - slices.Index(applyOrder, b.ref.Kind)
	})
	return ms, nil
}

func (c *Client) applyOne(ctx context.Context, m manifest) error {
	force := true
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: &force}
	name, data, ns := m.ref.Name, m.data, c.Namespace
	var err error
	switch m.ref.Kind {
	case "Secret":
		_, err = c.cs.CoreV1().Secrets(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
	case "ConfigMap":
		_, err = c.cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
	case "PersistentVolumeClaim":
		_, err = c.cs.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
	case "NetworkPolicy":
		_, err = c.cs.NetworkingV1().NetworkPolicies(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
	case "Service":
		_, err = c.cs.CoreV1().Services(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
	case "Pod":
		_, err = c.cs.CoreV1().Pods(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
	default:
		err = fmt.Errorf("unknown kind %s", m.ref.Kind)
	}
	return err
}

func (c *Client) deleteOne(ctx context.Context, r Ref) error {
	ns := c.Namespace
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	var err error
	switch r.Kind {
	case "Secret":
		err = c.cs.CoreV1().Secrets(ns).Delete(ctx, r.Name, opts)
	case "ConfigMap":
		err = c.cs.CoreV1().ConfigMaps(ns).Delete(ctx, r.Name, opts)
	case "PersistentVolumeClaim":
		err = c.cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, r.Name, opts)
	case "NetworkPolicy":
		err = c.cs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, r.Name, opts)
	case "Service":
		err = c.cs.CoreV1().Services(ns).Delete(ctx, r.Name, opts)
	case "Pod":
		// A second's grace: devaipod's Pods keep nothing worth a clean
		// stop that their volumes do not keep, and a NetworkPolicy waits
		// for them. Not 0, which deletes the object at once while the
		// node may still run the containers.
		one := int64(1)
		opts.GracePeriodSeconds = &one
		err = c.cs.CoreV1().Pods(ns).Delete(ctx, r.Name, opts)
	default:
		return fmt.Errorf("unknown kind %s", r.Kind)
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// deleteRefs deletes refs: Pods first; the NetworkPolicies once those
// Pods are gone (a Pod that outlived its policy would run unconfined);
// then the rest. It tries every object and joins the errors.
func (c *Client) deleteRefs(ctx context.Context, refs []Ref) error {
	var errs []error
	var pods []string
	for _, r := range refs {
		if r.Kind == "Pod" {
			pods = append(pods, r.Name)
			if err := c.deleteOne(ctx, r); err != nil {
				errs = append(errs, fmt.Errorf("delete %s: %w", r, err))
			}
		}
	}
	// Bounded: a Pod on a node that is gone stays Terminating until the
	// node controller gives up on it; the error then says the policy stays.
	wctx, cancel := context.WithTimeout(ctx, cmp.Or(c.goneTimeout, 2*time.Minute))
	podsGone := c.waitPodsGone(wctx, pods)
	cancel()
	for _, kind := range slices.Backward(applyOrder) {
		if kind == "Pod" {
			continue
		}
		for _, r := range refs {
			if r.Kind != kind {
				continue
			}
			if kind == "NetworkPolicy" && podsGone != nil {
				errs = append(errs, fmt.Errorf("kept %s: its Pods are still there: %w", r, podsGone))
				continue
			}
			if err := c.deleteOne(ctx, r); err != nil {
				errs = append(errs, fmt.Errorf("delete %s: %w", r, err))
			}
		}
	}
	return errors.Join(errs...)
}

// waitPodsGone waits until none of the named Pods exists.
func (c *Client) waitPodsGone(ctx context.Context, names []string) error {
	for {
		var left []string
		for _, n := range names {
			_, err := c.cs.CoreV1().Pods(c.Namespace).Get(ctx, n, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return err
			default:
				left = append(left, n)
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods %v still terminating: %w", left, ctx.Err())
		case <-time.After(c.poll):
		}
	}
}
