package explain

import "bindery/internal/vocab/state"

// stepWords is what people read of each step: its label on the timeline, what a request waits for
// there, and the fixed sentence a requester reads of a failure there.
var stepWords = map[state.Step]stepText{
	state.StepCreateStarted:         {label: "Merge request opened, pipeline running", waiting: "the bot to open {mr} and its pipeline to pass"},
	state.StepCreateSucceeded:       {label: "Pipeline passed"},
	state.StepCreateFailed:          {label: "Could not prepare the merge request", told: "bindery could not prepare the merge request"},
	state.StepCreatePipelineFailed:  {label: "Pipeline failed", told: "The pipeline of the merge request failed"},
	state.StepApprovalSending:       {label: "Sending to the approval system", waiting: "bindery to send the request to the approval system"},
	state.StepApprovalSent:          {label: "Sent for approval", waiting: "the approvers in the approval system"},
	state.StepApprovalSendFailed:    {label: "Could not reach the approval system", told: "bindery could not send the request to the approval system"},
	state.StepApprovalRejected:      {label: "Rejected by the approvers"},
	state.StepQueued:                {label: "Approved, waiting for a batch", waiting: "the next batch of its project"},
	state.StepBatched:               {label: "Taken into a batch", waiting: "the bot to open the batch's merge request"},
	state.StepCreateInvalid:         {label: "The change failed validation", told: "The file change rendered for this request is not valid"},
	state.StepBatchAbandoned:        {label: "Its batch was stopped before the merge", told: "The batch that carried this request was stopped before its merge request merged: an operator settled it, or it stayed blocked for too long"},
	state.StepHandleStarted:         {label: "Waiting for the reviewer bots", waiting: "the reviewer bots to approve and merge {mr}"},
	state.StepHandleApproved:        {label: "Approved by the reviewer bots, merging", waiting: "the bot to merge {mr}"},
	state.StepHandleMerged:          {label: "Merged, waiting for the deploy", waiting: "the deploy pipeline to report that {mr} is deployed"},
	state.StepHandleFailed:          {label: "Merge failed", told: "The merge failed"},
	state.StepHandleRebaseConflict:  {label: "Rebase conflict", told: "The change conflicts with the target branch, even after bindery regenerated the branch"},
	state.StepHandleMergeFailed:     {label: "GitLab refused the merge", told: "GitLab did not merge the merge request"},
	state.StepHandlePipelineFailed:  {label: "Pipeline failed after the rebase", told: "The pipeline failed after the branch was rebased"},
	state.StepHandleApproveFailed:   {label: "Could not approve the merge request", told: "bindery's reviewer accounts could not approve the merge request"},
	state.StepHandleMRClosed:        {label: "Merge request closed outside bindery", told: "The merge request was closed outside bindery"},
	state.StepCloseStarted:          {label: "Revoking: the file is being removed", waiting: "the removal of the binding's file to merge ({mr})"},
	state.StepCloseSucceeded:        {label: "Removed: the removal is deployed"},
	state.StepCloseFailed:           {label: "Removing the file failed", told: "Removing the file failed"},
	state.StepCloseMerged:           {label: "Removal merged, waiting for the deploy", waiting: "the deploy pipeline to report that the removal ({mr}) is deployed; until then the binding is still in effect"},
	state.StepWithdrawn:             {label: "Withdrawn"},
	state.StepCalledBack:            {label: "Deployed: in effect"},
	state.StepHandlePipelinePending: {label: "The pipeline gave no answer in time"},
	state.StepCreatePipelinePending: {label: "The pipeline gave no answer in time"},
	state.StepHandleRebasePending:   {label: "The rebase gave no answer in time"},
	state.StepHandleMRBlocked:       {label: "Merge blocked: a person must act in GitLab", waiting: "someone to act on {mr} in GitLab: {note}. bindery goes on by itself once that is done"},
}
