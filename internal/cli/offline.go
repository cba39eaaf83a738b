package cli

// The commands that need no server: token new (the offline side of audit
// verify, and the check of a backup, are the engine package's).

import (
	"fmt"
	"io"
	"strings"

	"github.com/fenceq/fenceq/api"
)

const tokenSynopsis = "fenceq token new NAME --roles ROLE[,ROLE…] (roles: producer, worker, admin)"

// tokenCommand: fenceq token new NAME --roles worker,producer (the
// arguments after "new").
func tokenCommand(args []string, stdout, stderr io.Writer) error {
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	fs := NewFlagSet("fenceq token new", stderr)
	rolesFlag := fs.String("roles", "", "comma-separated roles: producer, worker, admin")
	SetUsage(fs, stdout, tokenSynopsis, "Make a bearer token for principal NAME: print the token (once; it is stored nowhere) and\n"+
		"the line to add to the server's --auth-file, which holds only the token's SHA-256.")
	if err := ParseWithEnv(fs, args); err != nil {
		return err
	}
	if name == "" {
		return UsageError{"usage: " + tokenSynopsis + "; see \"fenceq token new --help\""}
	}
	var roles []api.Role
	for _, r := range strings.Split(*rolesFlag, ",") {
		if r = strings.TrimSpace(r); r != "" {
			roles = append(roles, api.Role(r))
		}
	}
	token, line, err := api.NewToken(name, roles)
	if err != nil {
		return UsageError{err.Error()}
	}
	fmt.Fprintf(stdout, "token (shown once; give it to %s as \"Authorization: Bearer <token>\"):\n%s\n\n", name, token)
	fmt.Fprintf(stdout, "add this line to the auth file:\n%s\n", line)
	return nil
}
