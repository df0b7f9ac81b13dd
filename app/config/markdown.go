package config

import (
	"fmt"
	"io"
	"strings"
)

// WriteMarkdown writes docs/configuration.md: every setting of Config, in
// the struct's order, as a table of its environment variable, flag,
// default and help text. make generate writes it and a test holds the
// committed file to it, so the document cannot drift from the code.
func WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`# Configuration

<!-- Generated from app/config.Config by make generate; do not edit. -->

Every setting is an environment variable, mirrored by a flag of the same
name in lower case with dashes (` + "`DISPATCH_INTERVAL`" + ` and
` + "`-dispatch-interval`" + `); a flag wins over the variable. ` + "`erp <subcommand> -help`" + `
prints the same table with the values that apply now. A value that does not
parse or is out of range stops the start with a message naming the
variable. Tracing is configured by the standard ` + "`OTEL_*`" + ` variables
(see operations.md).

| Variable | Flag | Default | What it does |
|---|---|---|---|
`)
	for _, s := range settings() {
		def := "—"
		if s.def != "" {
			def = "`" + s.def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `-%s` | %s | %s |\n", s.env, s.flag, def, strings.ReplaceAll(s.help, "|", `\|`))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
