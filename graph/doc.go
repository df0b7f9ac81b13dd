// Package graph is the GraphQL contract (*.graphqls) and the code gqlgen
// generates from it (*.generated.go, never edited; `make generate`).
package graph
