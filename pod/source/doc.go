// Package source resolves what up is given (a local checkout, a git URL or
// a pull request URL) and checks it out with the host's git, changing
// nothing in the user's repository. It hands the repository on as data: a
// tar stream of HEAD's files (TarTree) and what ScanTree finds in it.
package source
