{-|
An independent model of the cycle rules of "K2C.Fifo", "K2C.Branch",
"K2C.Repeat" and the test stage "Stages", written from the rules as stated
(lists, no Clash):

* fifo: ready = count < depth; valid = count > 0 (the oldest beat); a beat
  accepted in cycle t counts from t+1; a beat moved out in t is gone in t+1.
* blockFifo: as fifo, but the oldest beat is valid only from the second cycle
  after it was accepted (the block RAM's registered read).
* repeatS n: ready = nothing held; the held beat is valid until it has moved
  n times.
* branches: fork valid to one head = input valid && other head ready, ready
  upstream = all heads ready; join valid = all tails valid, ready to one tail
  = downstream ready && all other tails valid.
* 'Br3' is one 3-input fork/join with those rules; the nested Clash
  @branches a (branches b c)@ must behave exactly like it.

Every component's ready and valid are functions of its state alone, so one
cycle is: read ready/valid of all states, then step every state.
-}
module Reference
  ( V (..)
  , Net (..)
  , St
  , start
  , ready
  , out
  , step
  ) where

-- | Beat values: leaves and pairs (as the Clash tuples nest).
data V = L Integer | P V V deriving (Eq, Show)

data Net
  = Fifo Int
  | BlockFifo Int
  | Repeat Int
  | Hold Int (Integer -> Integer)
  | Seq Net Net
  | Br Net Net
  | Br3 Net Net Net

data St
  = SFifo Int [V]
  | SBlock Int [(V, Int)]  -- the beats and the cycles since each was accepted
  | SRepeat Int (Maybe (V, Int))  -- the held beat and how often it moved
  | SHold Int (Integer -> Integer) (Maybe (V, Int))
  | SSeq St St
  | SBr St St
  | SBr3 St St St

start :: Net -> St
start (Fifo d)      = SFifo d []
start (BlockFifo d) = SBlock d []
start (Repeat n)    = SRepeat n Nothing
start (Hold k f)    = SHold k f Nothing
start (Seq a b)     = SSeq (start a) (start b)
start (Br a b)      = SBr (start a) (start b)
start (Br3 a b c)   = SBr3 (start a) (start b) (start c)

ready :: St -> Bool
ready (SFifo d q)     = length q < d
ready (SBlock d q)    = length q < d
ready (SRepeat _ s)   = s == Nothing
ready (SHold _ _ s)   = s == Nothing
ready (SSeq a _)      = ready a
ready (SBr a b)       = ready a && ready b
ready (SBr3 a b c)    = ready a && ready b && ready c

out :: St -> Maybe V
out (SFifo _ q)            = case q of { v : _ -> Just v; [] -> Nothing }
out (SBlock _ q)           = case q of { (v, age) : _ | age >= 2 -> Just v; _ -> Nothing }
out (SRepeat _ s)          = fst <$> s
out (SHold _ _ (Just (v, 0))) = Just v
out (SHold _ _ _)          = Nothing
out (SSeq _ b)             = out b
out (SBr a b)              = P <$> out a <*> out b
out (SBr3 a b c)           = (\x y z -> P x (P y z)) <$> out a <*> out b <*> out c

valid :: St -> Bool
valid = maybe False (const True) . out

-- | One cycle: the offered input beat (Nothing = not valid) and downstream's
-- ready.
step :: St -> Maybe V -> Bool -> St
step s@(SFifo d q) input r = SFifo d (kept ++ taken)
  where
    kept  = if r && not (null q) then tail q else q
    taken = if ready s then maybe [] pure input else []
step s@(SBlock d q) input r = SBlock d (map older kept ++ taken)
  where
    kept  = if r && valid s then tail q else q
    taken = if ready s then maybe [] (\v -> [(v, 1)]) input else []
    older (v, age) = (v, age + 1)
step s@(SRepeat n slot) input r = SRepeat n slot'
  where
    slot' = case slot of
      Just (v, k) | r -> if k + 1 == n then Nothing else Just (v, k + 1)
      Just held -> Just held
      Nothing | ready s, Just v <- input -> Just (v, 0)
      Nothing -> Nothing
step s@(SHold k f slot) input r = SHold k f slot'
  where
    slot' = case slot of
      Just (_, 0) | r -> Nothing
      Just (v, t) | t > 0 -> Just (v, t - 1)
      Just held -> Just held
      Nothing | ready s, Just (L x) <- input -> Just (L (f x), k - 1)
      Nothing -> Nothing
step (SSeq a b) input r = SSeq (step a input (ready b)) (step b (out a) r)
step (SBr a b) input r =
  SBr (step a (gate (ready b) input) (r && valid b))
      (step b (gate (ready a) input) (r && valid a))
step (SBr3 a b c) input r =
  SBr3 (step a (gate (ready b && ready c) input) (r && valid b && valid c))
       (step b (gate (ready a && ready c) input) (r && valid a && valid c))
       (step c (gate (ready a && ready b) input) (r && valid a && valid b))

gate :: Bool -> Maybe V -> Maybe V
gate True v  = v
gate False _ = Nothing
