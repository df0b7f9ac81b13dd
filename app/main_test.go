package app_test

import (
	"testing"

	"erp/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
