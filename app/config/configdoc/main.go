// Command configdoc writes docs/configuration.md, the table of every
// setting, from app/config.Config to standard output (make generate).
package main

import (
	"fmt"
	"os"

	"erp/app/config"
)

func main() {
	if err := config.WriteMarkdown(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}
