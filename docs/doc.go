// Package docs is the user documentation: README.md at the repository's
// root and the Markdown files beside this one, by topic. It holds no code;
// its test runs every shell and GraphQL example of those files against a
// fresh server and checks that every relative link leads somewhere.
package docs
