package spawner

import (
	"bytes"
	"encoding/json"
	"fmt"

	yaml "go.yaml.in/yaml/v3"
)

// yamlToJSON converts YAML (or JSON) to JSON keeping the order of mapping
// keys, which KubeSpawner's semantics depend on (the first choice of a
// profile option is its default; of two spellings of an override key the
// later wins).
func yamlToJSON(data []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind == 0 {
		return []byte("{}"), nil
	}
	var b bytes.Buffer
	if err := writeNode(&b, &doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeNode(b *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			b.WriteString("null")
			return nil
		}
		return writeNode(b, n.Content[0])
	case yaml.AliasNode:
		return writeNode(b, n.Alias)
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			var key string
			if err := n.Content[i].Decode(&key); err != nil {
				return fmt.Errorf("line %d: mapping keys must be strings: %w", n.Content[i].Line, err)
			}
			kb, _ := json.Marshal(key)
			b.Write(kb)
			b.WriteByte(':')
			if err := writeNode(b, n.Content[i+1]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeNode(b, c); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		vb, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		b.Write(vb)
	}
	return nil
}
