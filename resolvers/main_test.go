package resolvers_test

import (
	"testing"

	"erp/db/pgtest"
)

// The tests of this package run the whole application (apptest) and
// call the resolvers through GraphQL, as clients do.
func TestMain(m *testing.M) { pgtest.Main(m) }
