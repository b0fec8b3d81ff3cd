package naming_test

import (
	"fmt"

	"github.com/spawnkit/spawnkit/naming"
)

func ExampleSafeSlug() {
	for _, name := range []string{"alice", "Alice", "user--x", "ünïcode"} {
		slug, _ := naming.SafeSlug(name, 0)
		fmt.Println(slug)
	}
	// Output:
	// alice
	// alice---3bc51062
	// user-x---cf4d81f6
	// n-code---b8be8967
}

func ExampleEscapeSlug() {
	fmt.Println(naming.EscapeSlug("Alice.Smith"))
	// Output: -41lice-2e-53mith
}

func ExampleNamer_Names() {
	namer, err := naming.New(naming.Options{HubNamespace: "jhub", UserNamespaces: true})
	if err != nil {
		panic(err)
	}
	names, err := namer.Names(naming.Server{Username: "alice", Servername: "gpu"})
	if err != nil {
		panic(err)
	}
	fmt.Println(names.Namespace)
	fmt.Println(names.Pod)
	fmt.Println(names.PVC)
	fmt.Println(names.DNS)
	// Output:
	// jhub-alice
	// jupyter-alice--gpu
	// claim-alice--gpu
	// jupyter-alice--gpu.jhub-alice.svc.cluster.local
}

func ExampleParse_go() {
	tmpl, err := naming.Parse("{{ .UnescapedUsername | lower | trunc 5 }}-{{ .UserID }}", naming.Go)
	if err != nil {
		panic(err)
	}
	fields, _ := naming.NewFields(naming.Server{Username: "Bartholomew", UserID: 42}, naming.SchemeSafe, "default")
	out, _ := tmpl.Execute(fields)
	fmt.Println(out)
	// Output: barth-42
}

func ExampleParseValue() {
	volumes := []any{
		map[string]any{"name": "home", "hostPath": map[string]any{"path": "/data/{username}"}},
	}
	v, err := naming.ParseValue(volumes, naming.KubeSpawner)
	if err != nil {
		panic(err)
	}
	fields, _ := naming.NewFields(naming.Server{Username: "alice"}, naming.SchemeSafe, "default")
	out, _ := v.Expand(fields)
	fmt.Println(out)
	// Output: [map[hostPath:map[path:/data/alice] name:home]]
}
