// Command check loads a Compose file the way `docker compose config` does, with the Compose
// specification's own loader (github.com/compose-spec/compose-go/v2): schema validation,
// interpolation of ${VARIABLES} from the environment and a .env file next to the file, merge
// keys and extensions resolved, then the consistency checks (dependencies, volumes, networks).
// It starts nothing and needs no Docker engine.
//
// Usage: go run . <path/to/docker-compose.yml>
//
// On success it prints the normalized project as JSON on stdout and exits 0. On an invalid
// file it prints the loader's error on stderr and exits 1; on a usage error it exits 2.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: check <path/to/docker-compose.yml>")
		os.Exit(2)
	}
	path, err := filepath.Abs(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
		os.Exit(2)
	}
	// The options `docker compose -f <file> config` uses: the project directory is the file's
	// folder, its name comes from the file or the folder, variables from the OS and .env.
	options, err := cli.NewProjectOptions(
		[]string{path},
		cli.WithWorkingDirectory(filepath.Dir(path)),
		cli.WithOsEnv,
		cli.WithDotEnv,
		cli.WithConfigFileEnv,
		cli.WithDefaultProfiles(),
		cli.WithName(""),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
		os.Exit(1)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
		os.Exit(1)
	}
	out, err := project.MarshalJSON()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: cannot print the normalized project: %v\n", path, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
