// Package snippets holds no code: its test proves that every Go snippet
// in the repository's Markdown (README.md, docs/, and each README below
// the root) is a whole program that a reader can paste and run.
//
// For each ```go block, TestSnippets writes the block into a directory of
// its own inside this module (named _run-*, which ./... ignores, removed
// afterwards), so it builds with the repository's go.mod as a reader's
// copy in a clone does; runs go vet and go build; and runs the program
// against a simulated cluster (internal/testcluster, the cluster `make
// cluster` starts), with KUBECONFIG naming its kubeconfig. A program that
// reads another *_KUBECONFIG variable (os.Getenv("GPU_EU_KUBECONFIG"))
// gets a second cluster of its own, as a reader who runs `make cluster`
// twice does. A block that is not a whole program (package main with
// func main), does not compile or vet, or exits non-zero within
// runTimeout fails the test with the Markdown file and line.
package snippets
