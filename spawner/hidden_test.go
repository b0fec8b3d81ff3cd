package spawner

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/spawnkit/spawnkit/kubespawner"
)

// hidden is the unexported field name of c, readable and settable. A few
// tests here compare configurations without the option values they were
// made from, or check what Override marks, and kubespawner keeps those
// to itself; its own tests use the fields directly.
func hidden(c *kubespawner.Config, name string) reflect.Value {
	f := reflect.ValueOf(c).Elem().FieldByName(name)
	if !f.IsValid() {
		panic(fmt.Sprintf("kubespawner.Config has no field %q", name))
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}
