package kubespawner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	yaml "go.yaml.in/yaml/v3"
)

// Limits of a configuration document. yaml.v3's own decoder refuses alias
// bombs by a similar rule; the converter walks nodes itself, so it bounds
// them itself.
const (
	// MaxConfigSize is the largest configuration Load reads.
	MaxConfigSize = 4 << 20
	// maxAliasNodes is how many nodes aliases may add by expansion beyond
	// the document's own node count.
	maxAliasNodes = 10000
	// maxDepth bounds the nesting of the converted value.
	maxDepth = 1000
)

// yamlToJSON converts YAML (or JSON) to JSON keeping the order of mapping
// keys, which KubeSpawner's semantics depend on (the first choice of a
// profile option is its default; of two spellings of an override key the
// later wins). Merge keys ("<<") are applied; aliases are expanded within
// a budget; a duplicate key or a second document is an error.
func yamlToJSON(data []byte) ([]byte, error) {
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("document is %d bytes, more than the limit of %d", len(data), MaxConfigSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return []byte("{}"), nil
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d: a configuration is one YAML document, found a second", extra.Line)
	}
	if doc.Kind == 0 {
		return []byte("{}"), nil
	}
	c := &converter{budget: maxAliasNodes + countNodes(&doc)}
	var b bytes.Buffer
	if err := c.write(&b, &doc, 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// converter writes nodes as JSON; budget is how many more nodes it may
// write, which aliases cannot push beyond the document's size plus
// maxAliasNodes.
type converter struct{ budget int }

func countNodes(n *yaml.Node) int {
	total := 1
	for _, c := range n.Content {
		total += countNodes(c)
	}
	return total
}

func (c *converter) write(b *bytes.Buffer, n *yaml.Node, depth int) error {
	c.budget--
	if c.budget < 0 {
		return fmt.Errorf("line %d: aliases expand to more than %d extra values (an alias bomb?)", n.Line, maxAliasNodes)
	}
	if depth > maxDepth {
		return fmt.Errorf("line %d: nested more than %d levels deep", n.Line, maxDepth)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			b.WriteString("null")
			return nil
		}
		return c.write(b, n.Content[0], depth)
	case yaml.AliasNode:
		return c.write(b, n.Alias, depth+1)
	case yaml.MappingNode:
		entries, err := c.entries(n, depth)
		if err != nil {
			return err
		}
		b.WriteByte('{')
		for i, e := range entries {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(e.key)
			b.Write(kb)
			b.WriteByte(':')
			if err := c.write(b, e.value, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := c.write(b, e, depth+1); err != nil {
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
	default:
		return fmt.Errorf("line %d: unsupported YAML node", n.Line)
	}
	return nil
}

type yamlEntry struct {
	key   string
	value *yaml.Node
	line  int // the key's line
}

// entries lists a mapping's keys in order with merge keys applied as YAML
// 1.1 defines them: the merged mappings' keys appear where "<<" stands,
// keys written in the mapping itself win over merged ones, and of several
// merged mappings the earlier wins.
func (c *converter) entries(n *yaml.Node, depth int) ([]yamlEntry, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("line %d: merge keys nested more than %d levels deep", n.Line, maxDepth)
	}
	own := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if isMerge(k) {
			continue
		}
		var key string
		if err := k.Decode(&key); err != nil {
			return nil, fmt.Errorf("line %d: mapping keys must be strings: %w", k.Line, err)
		}
		if own[key] {
			return nil, fmt.Errorf("line %d: mapping key %q already defined", k.Line, key)
		}
		own[key] = true
	}
	var out []yamlEntry
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !isMerge(k) {
			var key string
			_ = k.Decode(&key)
			out = append(out, yamlEntry{key, v, k.Line})
			continue
		}
		sources := []*yaml.Node{v}
		if resolve(v).Kind == yaml.SequenceNode {
			sources = resolve(v).Content
		}
		for _, src := range sources {
			src = resolve(src)
			if src.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("line %d: a merge key (<<) takes a mapping or a list of mappings", v.Line)
			}
			c.budget -= len(src.Content)
			if c.budget < 0 {
				return nil, fmt.Errorf("line %d: merge keys expand to more than %d extra values", v.Line, maxAliasNodes)
			}
			merged, err := c.entries(src, depth+1)
			if err != nil {
				return nil, err
			}
			for _, e := range merged {
				if own[e.key] || seen[e.key] {
					continue
				}
				seen[e.key] = true
				out = append(out, e)
			}
		}
	}
	return out, nil
}

func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge"
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < maxDepth; i++ {
		n = n.Alias
	}
	return n
}
