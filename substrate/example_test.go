package substrate_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/card-dev/card/substrate"
)

// The daemon opens the substrate once from card.toml's [substrate] table and
// the environment it read at startup, answers substrate.info with Describe,
// and maps the typed errors to its error codes.
func ExampleOpen() {
	ctx := context.Background()
	env := map[string]string{"HOME": os.TempDir(), "PATH": "/usr/bin:/bin"}
	s, closer, err := substrate.Open(ctx, substrate.Config{ReadOnly: true}, env)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closer.Close()

	fmt.Printf("%+v\n", substrate.Describe(s))
	_, err = s.RunCommand(ctx, "make deploy", 0)
	fmt.Println(errors.Is(err, substrate.ErrReadOnly))
	// Output:
	// {Name:local Local:true PTY:false ReadOnly:true}
	// true
}

func ExampleWriteTextCreateOnly() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "card-example")
	defer os.RemoveAll(dir)
	local := substrate.NewLocal(map[string]string{"HOME": dir, "PATH": "/usr/bin:/bin"})
	defer local.Close()

	path := filepath.Join(dir, "notes.md")
	fmt.Println(substrate.WriteTextCreateOnly(ctx, local, path, "first"))
	err := substrate.WriteTextCreateOnly(ctx, local, path, "second")
	fmt.Println(errors.Is(err, substrate.ErrPathExists))
	// Output:
	// <nil>
	// true
}
