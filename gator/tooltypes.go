package gator

// The tools' arguments. Every repository tool embeds repoRef: the agent
// names the repository on every call, and the policy checks that name.

type repoRef struct {
	Owner string `json:"owner" jsonschema:"the repository's owner: a user or an organisation"`
	Repo  string `json:"repo" jsonschema:"the repository's name"`
}

func (r repoRef) target() (string, string) { return r.Owner, r.Repo }

type statusArgs struct{}

func (statusArgs) target() (string, string) { return "", "" }

type getFileArgs struct {
	repoRef
	Path string `json:"path,omitempty" jsonschema:"the file or directory, relative to the repository's root; empty for the root"`
	Ref  string `json:"ref,omitempty" jsonschema:"a branch, tag or commit; the default branch if empty"`
}

type listArgs struct {
	repoRef
	State   string `json:"state,omitempty" jsonschema:"open (the default), closed or all"`
	Page    int    `json:"page,omitempty" jsonschema:"the page, from 1"`
	PerPage int    `json:"per_page,omitempty" jsonschema:"results per page, at most 100 (default 30)"`
}

type listIssuesArgs struct {
	listArgs
	Labels []string `json:"labels,omitempty" jsonschema:"only issues with all these labels"`
}

type numberArgs struct {
	repoRef
	Number int `json:"number" jsonschema:"the issue or pull request number"`
}

type createDraftArgs struct {
	repoRef
	Title string `json:"title" jsonschema:"the pull request's title"`
	Body  string `json:"body,omitempty" jsonschema:"the pull request's description (Markdown)"`
	Head  string `json:"head" jsonschema:"the agent/ branch with the changes, pushed with push_branch (for example agent/fix-typo)"`
	Base  string `json:"base,omitempty" jsonschema:"the branch to merge into: the default branch (the only one allowed)"`
}

type commentArgs struct {
	repoRef
	Number int    `json:"number" jsonschema:"the issue or pull request number"`
	Body   string `json:"body" jsonschema:"the comment (Markdown)"`
}

type pushArgs struct {
	repoRef
	Branch string `json:"branch" jsonschema:"the branch to push the workspace's HEAD commit to; must start with agent/"`
}

type reviewComment struct {
	Path      string `json:"path" jsonschema:"the file, relative to the repository's root"`
	Line      int    `json:"line" jsonschema:"the line of the diff to comment on (the last line of a range)"`
	Side      string `json:"side,omitempty" jsonschema:"RIGHT (the new version, the default) or LEFT (the old)"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"the first line of a multi-line comment"`
	Body      string `json:"body" jsonschema:"the comment (Markdown)"`
}

type reviewArgs struct {
	repoRef
	Number   int             `json:"number" jsonschema:"the pull request number"`
	Body     string          `json:"body,omitempty" jsonschema:"the review's overall comment"`
	CommitID string          `json:"commit_id,omitempty" jsonschema:"the commit to review; the pull request's head if empty"`
	Comments []reviewComment `json:"comments,omitempty" jsonschema:"line comments"`
}

// The tools' results, trimmed to what an agent uses.

type dirEntry struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"` // file, dir, symlink, submodule
	Size int    `json:"size,omitempty"`
}

type fileResult struct {
	Type      string     `json:"type"`
	Path      string     `json:"path"`
	Ref       string     `json:"ref,omitempty"`
	SHA       string     `json:"sha,omitempty"`
	Size      int        `json:"size,omitempty"`
	Binary    bool       `json:"binary,omitempty"`
	Truncated bool       `json:"truncated,omitempty"`
	Content   string     `json:"content,omitempty"`
	Target    string     `json:"target,omitempty"` // a symlink's target
	Entries   []dirEntry `json:"entries,omitempty"`
}

type commentResult struct {
	ID        int64  `json:"id"`
	User      string `json:"user"`
	CreatedAt string `json:"created_at,omitempty"`
	Body      string `json:"body"`
	URL       string `json:"url,omitempty"`
}

type issueResult struct {
	Number    int             `json:"number"`
	Title     string          `json:"title"`
	State     string          `json:"state"`
	User      string          `json:"user"`
	Labels    []string        `json:"labels,omitempty"`
	Comments  int             `json:"comments"`
	CreatedAt string          `json:"created_at,omitempty"`
	UpdatedAt string          `json:"updated_at,omitempty"`
	URL       string          `json:"url"`
	Body      string          `json:"body,omitempty"`
	Thread    []commentResult `json:"thread,omitempty"` // get_issue: the comments, oldest first
}

type pullResult struct {
	Number       int             `json:"number"`
	Title        string          `json:"title"`
	State        string          `json:"state"`
	Draft        bool            `json:"draft"`
	Merged       bool            `json:"merged,omitempty"`
	User         string          `json:"user"`
	Head         string          `json:"head"`
	HeadSHA      string          `json:"head_sha,omitempty"`
	Base         string          `json:"base"`
	URL          string          `json:"url"`
	CreatedAt    string          `json:"created_at,omitempty"`
	UpdatedAt    string          `json:"updated_at,omitempty"`
	Body         string          `json:"body,omitempty"`
	Additions    int             `json:"additions,omitempty"`
	Deletions    int             `json:"deletions,omitempty"`
	ChangedFiles int             `json:"changed_files,omitempty"`
	Thread       []commentResult `json:"thread,omitempty"`
	Diff         string          `json:"diff,omitempty"`
	// DiffTruncated says Diff was cut at the gator's limit; DiffBytes is
	// the whole diff's size.
	DiffTruncated bool `json:"diff_truncated,omitempty"`
	DiffBytes     int  `json:"diff_bytes,omitempty"`
}

type createdResult struct {
	Number int    `json:"number,omitempty"`
	ID     int64  `json:"id,omitempty"`
	URL    string `json:"url"`
	Draft  bool   `json:"draft,omitempty"`
	State  string `json:"state,omitempty"`
}
