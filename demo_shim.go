package main

import (
	"erp/app"
	appconfig "erp/app/config"
)

// config and adminTokenFile keep demo.go compiling in package main until
// the demo moves into its own package (demo.Run with a demo.Config); then
// server.go calls demo.Run and this file goes.
type config = appconfig.Config

const adminTokenFile = app.AdminTokenFile
