package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// maskedGit looks for the masked files' blobs in the agent's git directory
// (the repository's .git in the agent): as loose objects and in every
// pack's index. It reads files only, so it needs no git in the image.
func (v *verifier) maskedGit(_ context.Context) (verifyResult, string) {
	if len(v.opts.maskedObjects) == 0 {
		return verifyNA, "no masked file in the repository"
	}
	objects := v.path(filepath.Join(v.opts.workspace, ".git", "objects"))
	idxs, err := filepath.Glob(filepath.Join(objects, "pack", "*.idx"))
	if err != nil {
		return verifyFail, err.Error()
	}
	var found []string
	for _, id := range v.opts.maskedObjects {
		if _, err := os.Lstat(filepath.Join(objects, id[:2], id[2:])); err == nil {
			found = append(found, id[:12]+" (loose)")
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return verifyFail, "cannot look: " + errText(err)
		}
		want, _ := hex.DecodeString(id)
		for _, idx := range idxs {
			in, err := packIndexHas(idx, want)
			if err != nil {
				return verifyFail, fmt.Sprintf("cannot read %s: %v", filepath.Base(idx), err)
			}
			if in {
				found = append(found, id[:12]+" (in "+filepath.Base(idx)+")")
				break
			}
		}
	}
	if len(found) > 0 {
		return verifyFail, "the git object store holds masked content: " + listSome(found, 4)
	}
	return verifyPass, fmt.Sprintf("none of %d masked blobs in %d pack(s) or loose", len(v.opts.maskedObjects), len(idxs))
}

// packIndexHas tells whether a version 2 pack index lists the object id:
// a fan-out table of 256 counts, then the sorted ids.
func packIndexHas(file string, id []byte) (bool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return false, err
	}
	const header = 8 + 256*4
	if len(data) < header || !bytes.Equal(data[:8], []byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}) {
		return false, errors.New("not a version 2 pack index")
	}
	n := int(binary.BigEndian.Uint32(data[8+255*4 : header]))
	if len(data) < header+n*len(id) {
		return false, errors.New("truncated")
	}
	ids := data[header : header+n*len(id)]
	i := sort.Search(n, func(i int) bool { return bytes.Compare(ids[i*len(id):(i+1)*len(id)], id) >= 0 })
	return i < n && bytes.Equal(ids[i*len(id):(i+1)*len(id)], id), nil
}
