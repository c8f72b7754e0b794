//! Recording a run's start, before its engine starts.
//!
//! In a git repository (the folder is its work tree or inside one): a tree of the folder's
//! working state, tracked and untracked files with ignored ones left out, written through
//! the agent's own index (`read-tree HEAD`, `add -A`, `write-tree`; the repository's index,
//! refs, work tree and object store are never touched: the objects go into the job's own
//! store, the repository's an alternate), `HEAD`'s commit, and the files that run later in
//! the repositories nested in the folder. Elsewhere, or when git cannot record it: a
//! bounded [`manifest`](crate::changes::manifest) of the folder with copies of small text
//! files.

use std::path::Path;

use anyhow::{Context, Result};
use chrono::Utc;
use tether_protocol::JobId;

use crate::changes::manifest::{self, Walk, START};
use crate::changes::record::{Base, GitStart, Manifest, StartRecord};
use crate::changes::runs_later;
use crate::changes::store::Store;
use crate::changes::tree::{self, Located, Trees};

/// Records `folder` as `job_id` finds it, replacing what was recorded for it before.
///
/// # Errors
/// When the folder cannot be read or the record cannot be written.
pub fn record(store: &Store, job_id: &JobId, folder: &Path) -> Result<StartRecord> {
    let folder = folder
        .canonicalize()
        .with_context(|| format!("cannot find {}", folder.display()))?;
    store.fresh_job_dir(job_id)?;
    let base = match tree::locate(&folder) {
        Ok(Some(located)) => match record_git(store, job_id, &folder, &located) {
            Ok(start) => Base::Git(start),
            Err(err) => {
                tracing::warn!(job = %job_id, "git could not record the run's start, listing the folder instead: {err:#}");
                store.fresh_job_dir(job_id)?;
                Base::Snapshot(folder_manifest(store, job_id, &folder))
            }
        },
        Ok(None) => Base::Snapshot(folder_manifest(store, job_id, &folder)),
        Err(err) => {
            tracing::warn!(job = %job_id, "git did not answer, listing the folder instead: {err}");
            Base::Snapshot(folder_manifest(store, job_id, &folder))
        }
    };
    let record = StartRecord {
        job_id: job_id.clone(),
        recorded_at: Utc::now(),
        folder,
        base,
    };
    if let Err(err) = store.save(&record) {
        store.forget(job_id);
        return Err(err);
    }
    Ok(record)
}

fn folder_manifest(store: &Store, job_id: &JobId, folder: &Path) -> Manifest {
    let walk = Walk {
        bounds: START,
        keep: manifest::every_file,
        copies: Some((store, job_id)),
    };
    walk.folder(folder)
}

fn record_git(store: &Store, job_id: &JobId, folder: &Path, located: &Located) -> Result<GitStart> {
    let trees = Trees::new(
        &located.repo,
        &located.prefix,
        &located.object_format,
        store,
    )?
    .with_own_objects(&store.objects_dir(job_id)?)?;
    let head = trees.head()?;
    let index = store.start_index(job_id);
    trees.read_head(&index, head.as_deref())?;
    let tree = trees.write(&index)?;
    let nested_roots = trees.nested_roots(&index)?;
    let nested = nested_manifest(folder, located, &nested_roots, Some((store, job_id)));
    Ok(GitStart {
        git_dir: located.repo.git_dir.clone(),
        work_tree: located.repo.work_tree.clone(),
        prefix: located.prefix.clone(),
        object_format: located.object_format.clone(),
        tree,
        head,
        nested_roots,
        nested,
        own_objects: true,
    })
}

/// The files that run later in the repositories nested in `folder` (their `.git/hooks` and
/// `.git/config` too), and in the folder's own `.git` when it holds it: none of them is in a
/// tree of the folder.
pub fn nested_manifest(
    folder: &Path,
    located: &Located,
    roots: &[String],
    copies: Option<(&Store, &JobId)>,
) -> Manifest {
    let walk = Walk {
        bounds: START,
        keep: runs_later::runs_later,
        copies,
    };
    let mut manifest = Manifest::default();
    if located.prefix.is_empty() && located.repo.git_dir == folder.join(".git") {
        walk.extend(&mut manifest, folder, ".git");
    }
    for root in roots {
        walk.extend(&mut manifest, folder, root);
    }
    manifest::sort(&mut manifest);
    manifest
}
