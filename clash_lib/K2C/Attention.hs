{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables, RankNTypes,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType, TypeFamilies,
             AllowAmbiguousTypes, DeriveGeneric, DeriveAnyClass #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=16 #-}
{-|
Scaled dot-product attention over a sequence of @n@ steps with @h@ heads: what
Keras' @MultiHeadAttention@ computes between its input projections and its
output projection (docs/guide/contract.md, "Attention").

= Arithmetic

A beat is one step's projections @q ++ k ++ v@ (@h * dk@, @h * dk@, @h * dv@
values, head by head; the @1 / sqrt dk@ scale is in the query's projection
or in the softmax's table). For each step @t@ (a query), head @i@ and step
@j@ (a key):

1. the score @s = round(sum_d q[t,i,d] * k[j,i,d])@ to the score format (the
   products and their sum exact); with a causal mask, a key after the query
   (@j > t@) scores the format's minimum;
2. the row @s[t,i,0..n-1]@ through the softmax stream stage the caller gives
   ("K2C.Softmax": the probabilities @p@);
3. the output @o[t,i,e] = finish(sum_j p[j] * v[j,i,e])@ (the products and
   their sum exact), @finish@ the caller's requantization to the output format.

The output beat of step @t@ is @o[t,0,..] ++ .. ++ o[t,h-1,..]@.

= Hardware

* the sequence's @q@, @k@ and @v@ in three LUT RAMs ('asyncRam', written as
  the beats move in; @q@ and @k@ read by the job counter, @v@ by the mixer);
* one score a cycle on a pipeline of @'ScoreDepth' dk@ registers: the
  operands twice (the LUT RAMs' reads and the head's multiplexer, then the
  multipliers' own input registers, so no route from the LUT RAMs ends in a
  multiplier: read straight into one, the jobs' LUT RAM -> 4.7 ns of route ->
  a MULT18X18D's unregistered input is 14.2 ns on ECP5), @dk@
  products, their exact sum as a tree with a register a level ("K2C.Tree"),
  the rounding and the mask; then the row collected ("K2C.Collect");
* the softmax of a row a beat (the caller's stream stage);
* the mixer: a row's @n@ probabilities one a cycle, each with its key's @v@
  values ("K2C.Scatter"'s control, 'heldFor'), the operands registered three
  times before @dv@ multipliers ('MixDepth': the LUT RAM's read and the
  multiplexers, a plain copy, which place and route duplicates next to each
  multiplier that shares the probability, then the multipliers' own input
  registers; with two, the copies took the multiplexers' output over the
  chip, 4.5 ns of route on ECP5), the row's products summed as they come
  ("K2C.Collect"'s 'collectSum': each product registered, then added into
  @dv@ accumulators, not the row's @n dv@ products and an adder tree), the
  rounding on 'SumDepth' registers, then the @h@ heads of a step collected
  into the output beat.

= Protocol and exact timing

Filling, input ready is high (registered state only) and the beats are
written at steps @0, 1, ..@. The cycle after the @n@-th beat moved in, the
jobs start: the job @(t, i, j)@ (@j@ fastest, then the head, then the query)
is valid, each next one from the cycle after the one before left. After the
last job the block waits until the mixer's last beat (of row @(n-1, h-1)@)
moved, and fills again from the cycle after it. The stages between are
"K2C.Pipe"'s and "K2C.Collect"'s, "K2C.Scatter"'s rules for the mixer.
-}
module K2C.Attention
  ( attention
  , ScoreDepth
  , MixDepth
  , SumDepth
  ) where

import Clash.Prelude hiding (scatter)
import Data.Maybe (isJust)

import K2C.Activation (requantize)
import K2C.Collect (collect, collectSum)
import K2C.Merge (mulExact, widen)
import K2C.Pipe (pipeS, stageReg)
import K2C.Scatter (heldFor)
import K2C.Stream (Stream, mapS, (|>))
import K2C.Tree (TreeDepth, treeFold)

-- | The score pipeline's registers over @dk@ products: the operands (twice),
-- the products, their exact sum (a level of the tree each), the rounding (and
-- the mask).
type ScoreDepth dk = 3 + TreeDepth dk + 1

-- | The mixer's registers: a probability and its key's values (three times), their
-- products.
type MixDepth = 4

-- | The registers after a row's sums (accumulated as its products come): the rounding.
type SumDepth = 1

-- | Attention over @n@ steps, @h@ heads of @dk@ key and @dv@ value features;
-- @causal@ masks the keys after each query; @softmaxRow@ is the row's softmax
-- stream stage; @finish@ rounds an exact output to the output format (its
-- modes are the format's). Inputs in @SFixed ii fi@, scores in @SFixed si sf@,
-- probabilities in @SFixed pi pf@, outputs in @SFixed oi fo@.
attention
  :: forall n h dk dv ii fi si sf pi pf oi fo dom
   . ( HiddenClockResetEnable dom
     , KnownNat n, 1 <= n, KnownNat h, 1 <= h, KnownNat dk, 1 <= dk, KnownNat dv, 1 <= dv
     , KnownNat ii, KnownNat fi, KnownNat si, KnownNat sf, KnownNat pi, KnownNat pf
     , KnownNat oi, KnownNat fo )
  => Bool
  -> Stream dom (Vec n (SFixed si sf), ()) (Vec n (SFixed pi pf), ())
  -> (SFixed (pi + ii + CLog 2 n) (pf + fi) -> SFixed oi fo)
  -> Stream dom (Vec (h * dk + h * dk + h * dv) (SFixed ii fi)) (Vec (h * dv) (SFixed oi fo))
attention causal softmaxRow finish (input, readyOut) = (output, readyIn)
  where
    -- the sequence: filling, playing the jobs, or waiting for the mixer to let go of v
    mode = register Filling nextMode
    count = register (0 :: Index n) nextCount
    readyIn = (== Filling) <$> mode
    accepted = readyIn .&&. (isJust <$> input)
    filled = accepted .&&. ((== maxBound) <$> count)
    nextCount = mux accepted (wrapIndex <$> count) count
    beat = fromJustX <$> input
    qs = asyncRam (SNat @n) qAt (mux accepted (Just <$> bundle (count, queries <$> beat)) (pure Nothing))
    ks = asyncRam (SNat @n) kAt (mux accepted (Just <$> bundle (count, keys <$> beat)) (pure Nothing))
    vs = asyncRam (SNat @n) vAt (mux accepted (Just <$> bundle (count, values <$> beat)) (pure Nothing))

    -- the jobs: (t, i, j), j fastest
    jobT = register (0 :: Index n) (mux jobMoves (mux (rowEnds .&&. headEnds) (wrapIndex <$> jobT) jobT) jobT)
    jobI = register (0 :: Index h) (mux (jobMoves .&&. rowEnds) (wrapIndex <$> jobI) jobI)
    jobJ = register (0 :: Index n) (mux jobMoves (wrapIndex <$> jobJ) jobJ)
    rowEnds = (== maxBound) <$> jobJ
    headEnds = (== maxBound) <$> jobI
    lastJob = rowEnds .&&. headEnds .&&. ((== maxBound) <$> jobT)
    playing = (== Playing) <$> mode
    jobMoves = playing .&&. jobsReady
    qAt = jobT
    kAt = jobJ
    jobs = mux playing (Just <$> (job <$> qs <*> ks <*> jobT <*> jobI <*> jobJ)) (pure Nothing)
    job q k t i j = (headOf @dk q i, headOf @dk k i, causal && j > t)

    nextMode = mode' <$> mode <*> filled <*> (jobMoves .&&. lastJob) <*> released
    mode' Filling True _ _ = Playing
    mode' Playing _ True _ = Waiting
    mode' Waiting _ _ True = Filling
    mode' m _ _ _ = m

    (rows, jobsReady) = (pipeS (SNat @(ScoreDepth dk)) scores |> collect (SNat @n) |> mapS (\s -> (s, ())) |> softmaxRow) (jobs, mixReady)

    -- the mixer: a row's probabilities one a cycle, each with its key's v
    (full, taken, delivered) = heldFor (SNat @n) (isJust <$> rows) mixOut
    mixReady = not <$> full
    held = register (deepErrorX "attention: no row yet") (mux taken (fst . fromJustX <$> rows) held)
    mixJ = register (0 :: Index n) (mux delivered (wrapIndex <$> mixJ) mixJ)
    mixI = register (0 :: Index h) (mux (delivered .&&. mixRowEnds) (wrapIndex <$> mixI) mixI)
    mixT = register (0 :: Index n) (mux (delivered .&&. mixRowEnds .&&. mixHeadEnds) (wrapIndex <$> mixT) mixT)
    mixRowEnds = (== maxBound) <$> mixJ
    mixHeadEnds = (== maxBound) <$> mixI
    released = delivered .&&. mixRowEnds .&&. mixHeadEnds .&&. ((== maxBound) <$> mixT)
    vAt = mixJ
    mixed = mux full (Just <$> ((\ps j v i -> (ps !! j, headOf @dv v i)) <$> held <*> mixJ <*> vs <*> mixI)) (pure Nothing)
    (output, mixOut) =
      ( pipeS (SNat @MixDepth) (stageReg . fmap (fmap (\(p, v) -> map (mixed' p) v)) . stageReg . stageReg . stageReg)
      |> collectSum (SNat @n)
      |> pipeS (SNat @SumDepth) (stageReg . fmap (fmap (map finish)))
      |> collect (SNat @h) ) (mixed, readyOut)

    -- a probability's product with a value, exact, widened to the sums' format
    mixed' :: SFixed pi pf -> SFixed ii fi -> SFixed (pi + ii + CLog 2 n) (pf + fi)
    mixed' p v = widen (mulExact p v)

    scores
      :: Signal dom (Maybe (Vec dk (SFixed ii fi), Vec dk (SFixed ii fi), Bool))
      -> Signal dom (Maybe (Vec 1 (SFixed si sf)))
    scores = stageReg . fmap (fmap finish) . treeFold (+) 0 . fmap (fmap widened) . stageReg . fmap (fmap multiply) . stageReg . stageReg
      where
        multiply (q, k, masked) = (masked, zipWith mulExact q k)
        widened (masked, ps) = (masked, map widen ps :: Vec dk (SFixed (ii + ii + CLog 2 dk) (fi + fi)))
        finish (masked, s) = (if masked then minBound else requantize s) :> Nil

    queries, keys :: Vec (h * dk + h * dk + h * dv) (SFixed ii fi) -> Vec (h * dk) (SFixed ii fi)
    queries b = takeI @(h * dk) b
    keys b = takeI @(h * dk) (dropI @(h * dk) b)
    values :: Vec (h * dk + h * dk + h * dv) (SFixed ii fi) -> Vec (h * dv) (SFixed ii fi)
    values b = dropI @(h * dk + h * dk) b

-- | What the sequence's store is doing.
data Mode = Filling | Playing | Waiting
  deriving (Eq, Generic, NFDataX)

-- | The next index, 0 after the last.
wrapIndex :: KnownNat m => Index m -> Index m
wrapIndex x = if x == maxBound then 0 else x + 1

-- | Head @i@'s @d@ values of a beat of @h * d@.
headOf :: forall d h a . (KnownNat d, KnownNat h) => Vec (h * d) a -> Index h -> Vec d a
headOf xs i = (unconcatI xs :: Vec h (Vec d a)) !! i
