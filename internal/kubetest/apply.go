package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

var metav1GetOptions = metav1.GetOptions{}

// FieldManager is the server-side-apply field manager of Apply.
const FieldManager = "kubetest"

// BootstrapKinds are the kinds of deploy/ that Start applies: what the API
// server takes without a kubelet or controllers, what the shipped RBAC
// needs and the admission policies that narrow it, in the order they are
// applied.
var BootstrapKinds = []string{
	"CustomResourceDefinition",
	"Namespace",
	"ServiceAccount",
	"ClusterRole",
	"Role",
	"ClusterRoleBinding",
	"RoleBinding",
	"ValidatingAdmissionPolicy",
	"ValidatingAdmissionPolicyBinding",
}

// ModuleRoot returns the directory of the project's go.mod, found by
// walking up from the working directory (a test's package directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module github.com/ipkeeper/ipkeeper")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kubetest: no go.mod of github.com/ipkeeper/ipkeeper above the working directory")
		}
		dir = parent
	}
}

// DeployDir returns the project's deploy/ directory.
func DeployDir() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "deploy"), nil
}

// Manifests reads every Kubernetes object in the .yaml, .yml and .json
// files directly in dir (not its subdirectories — as `kubectl apply -f
// dir`), in file-name order. Kustomize's own files (kind Kustomization)
// are left out. A file that is not valid YAML, or an object without
// apiVersion, kind or name, is an error naming the file.
func Manifests(dir string) ([]*unstructured.Unstructured, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
	}
	sort.Strings(names)
	var out []*unstructured.Unstructured
	for _, n := range names {
		objs, err := ManifestFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// ManifestFile reads the objects of one (multi-document) YAML or JSON file,
// leaving out empty documents and kustomize's Kustomization.
func ManifestFile(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("kubetest: %s document %d: %w", path, i, err)
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), len(doc)).Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				continue
			}
			return nil, fmt.Errorf("kubetest: %s document %d: %w", path, i, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if obj.GetKind() == "Kustomization" {
			continue
		}
		if obj.GetAPIVersion() == "" || obj.GetKind() == "" || obj.GetName() == "" {
			return nil, fmt.Errorf("kubetest: %s document %d: apiVersion, kind and metadata.name are required", path, i)
		}
		out = append(out, obj)
	}
}

// Apply applies objs as the admin with server-side apply (force, field
// manager FieldManager), in the order given. With dryRun the server
// validates and admits each object but stores nothing. A
// CustomResourceDefinition is waited for until Established so objects of
// its kind that follow can be applied.
func (s *Server) Apply(ctx context.Context, dryRun bool, objs ...*unstructured.Unstructured) error {
	dc, err := discovery.NewDiscoveryClientForConfig(s.Config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			mapper.Reset()
			m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return fmt.Errorf("kubetest: %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := ri.Apply(ctx, obj.GetName(), obj, opts); err != nil {
			return fmt.Errorf("kubetest: apply %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
		}
		if gvk.Kind == "CustomResourceDefinition" && !dryRun {
			if err := waitEstablished(ctx, ri, obj.GetName()); err != nil {
				return err
			}
			mapper.Reset()
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, ri dynamic.ResourceInterface, name string) error {
	for {
		crd, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				cm, _ := c.(map[string]any)
				if cm["type"] == "Established" && cm["status"] == "True" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubetest: CustomResourceDefinition %s not established: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// applyDeployRBAC applies the BootstrapKinds objects of deploy/ (nothing
// when there is no deploy/ directory yet) and waits until the admission
// policies among them are in force.
func (s *Server) applyDeployRBAC(ctx context.Context) error {
	dir, err := DeployDir()
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	objs, err := Manifests(dir)
	if err != nil {
		return err
	}
	var ordered []*unstructured.Unstructured
	for _, kind := range BootstrapKinds {
		for _, o := range objs {
			if o.GetKind() == kind {
				ordered = append(ordered, o)
			}
		}
	}
	if err := s.Apply(ctx, false, ordered...); err != nil {
		return err
	}
	return s.waitPolicies(ctx, ordered)
}
