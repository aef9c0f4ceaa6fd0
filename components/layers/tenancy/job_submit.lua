-- Managed by gpu-fleet (the tenancy layer): changes made here are overwritten on the next `pulumi up`.
--
-- Two rules at submission, before a job can hold anything:
--  1. A GPU request that names no type gets the fleet's one type, so that the teams' typed
--     limits (GrpTRES gres/gpu:<type>) bind it; with several types it is refused, naming them.
--  2. A request for whole nodes' worth of GPUs as a job total (--gpus=N, N >= a node's GPUs)
--     without a per-node count is refused: Slurm may spread it over nodes, and a tensor-parallel
--     group split across nodes runs at network speed instead of NVLink's.
-- The fleet's facts are filled in by the renderer (GPU_TYPES, NODE_GPUS).

local GPU_TYPES = { @GPU_TYPES@ }
local NODE_GPUS = @NODE_GPUS@

-- "gres:gpu:8" (22.05), "gres/gpu:8" (23.02 and later), optionally "gres/gpu:v100:8"; several
-- GRES are comma-separated
local function gpu_parts(tres)
  local out = {}
  if tres == nil or tres == "" then return out end
  for item in string.gmatch(tres, "[^,]+") do
    local sep, rest = string.match(item, "^gres([:/])gpu(.*)$")
    if sep ~= nil then
      local typ, count = string.match(rest, "^:([%w_]+):(%d+)$")
      if typ == nil then count = string.match(rest, "^:(%d+)$") end
      if rest == "" then count = "1" end
      table.insert(out, { item = item, sep = sep, type = typ, count = tonumber(count) })
    end
  end
  return out
end

local function typed(tres)
  local changed = false
  local items = {}
  for item in string.gmatch(tres, "[^,]+") do table.insert(items, item) end
  for _, p in ipairs(gpu_parts(tres)) do
    if p.type == nil and p.count ~= nil then
      for i, item in ipairs(items) do
        if item == p.item then
          items[i] = "gres" .. p.sep .. "gpu:" .. GPU_TYPES[1] .. ":" .. p.count
          changed = true
        end
      end
    end
  end
  return table.concat(items, ","), changed
end

local function untyped(tres)
  for _, p in ipairs(gpu_parts(tres)) do
    if p.type == nil then return true end
  end
  return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local per_node, per_job = job_desc.tres_per_node, job_desc.tres_per_job
  if per_node == nil or per_node == "" then
    for _, p in ipairs(gpu_parts(per_job)) do
      if p.count ~= nil and p.count >= NODE_GPUS then
        slurm.log_user("gpu-fleet: --gpus=%d asks for whole nodes' GPUs as a job total, which Slurm may " ..
                       "spread over nodes (a tensor-parallel group must stay inside one node's NVLink); ask " ..
                       "for whole nodes instead: --nodes=%d --gpus-per-node=%d",
                       p.count, math.ceil(p.count / NODE_GPUS), NODE_GPUS)
        return slurm.ERROR
      end
    end
  end
  for _, field in ipairs({ "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket" }) do
    local tres = job_desc[field]
    if tres ~= nil and tres ~= "" and untyped(tres) then
      if #GPU_TYPES ~= 1 then
        slurm.log_user("gpu-fleet: name the GPU type (--gres=gpu:<type>:N); this fleet has %s",
                       table.concat(GPU_TYPES, ", "))
        return slurm.ERROR
      end
      local new, changed = typed(tres)
      if changed then job_desc[field] = new end
    end
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

return slurm.SUCCESS
