{-# LANGUAGE DataKinds, TypeFamilies, MonoLocalBinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType,
             AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=16 #-}
{-|
Softmax over one beat (the last axis), computed for real (docs/guide/contract.md,
"Activations: softmax").

= Arithmetic

With @m = max_i r_i@ (raw inputs, format @SFixed ii fi@):

1. @d_i = m - r_i >= 0@ (exact, one bit wider);
2. @e_i = exp_table[min(d_i >> s, nE - 1)]@: @exp(-x)@ at the centre of each
   bucket of @2^s@ raw values, rounded half up to the table's fraction bits
   (@fo + 4@); the last entry is 0 (every @d@ from there on rounds to 0);
3. @S = sum_i e_i@, exact (@S > 0@: the maximum's own entry is about 1);
4. @y_i = floor((2 e_i 2^fo + S) / (2 S))@: @e_i / S@ rounded half up to the
   output's @fo@ fraction bits by an exact integer division, then saturated.

The maximum error (a bound, from the table's enumerated error) is written next
to each use in Network.hs.

= Storage

The exponential table is a memory file (@weights/<layer>_softmax.mem@), or
its bit slices ("K2C.Lut", 'TableRom'), read by an asynchronous ROM per
element of the beat.

= Hardware and timing

'softmax' is combinational: a maximum tree, @n@ subtractors, @n@ ROM reads,
an adder tree and @n@ dividers of @w@ bits, one long path.

'softmaxS' computes the same values as a stream stage pipelined in
'SoftmaxDepth' register stages ("K2C.Pipe"): the beat (its values come from
a queue's LUT RAM, read combinationally), the maximum ('argmaxTree', one
register per comparison level), the table indices (subtractions and clips),
the exponentials (ROM reads: block RAM where the synthesis tool absorbs the
stage register into it, so its data gets a register of its own, the block's
output register, and one more in the fabric for the route from the block
RAM's row), the sum (groups of four, then the groups), the numerators, then
the divisions as restoring long divisions of 'StepsPerStage' quotient bits
per stage (a subtraction and a comparison each). Each beat carries a payload
@t@ through the pipeline unchanged (the class, at the network's output).
Its timing is "K2C.Pipe"'s with @d = SoftmaxDepth fo@.

'softmaxSerialS' computes the same values with one division a cycle, for
beats of @n@ values that come once every @n@ cycles or slower (a row of
attention scores comes once every @n@ scores): 'softmaxS''s @n@ division
pipelines would be most of the block, each busy one cycle in @n@. It takes a
beat every @n + 1@ cycles. The stages
before the divisions on "K2C.Pipe" ('SoftmaxFrontDepth' registers), each
exponential with the sum scattered into a beat of its own ("K2C.Scatter"),
one division pipeline on "K2C.Pipe" ('SoftmaxDivideDepth' registers), the
quotients collected ("K2C.Collect"): those blocks' timing rules, composed.
-}
module K2C.Softmax
  ( softmax
  , softmaxS
  , softmaxSerialS
  , SoftmaxDepth
  , SoftmaxFrontDepth
  , SoftmaxDivideDepth
  , StepsPerStage
    -- * The division of step 4, for a block that divides one value at a time
  , Division
  , DivSteps
  , begin
  , divisorOf
  , step
  , quotient
  ) where

import Clash.Prelude hiding (scatter)

import K2C.Classify (TreeDepth, argmaxTree)
import K2C.Collect (collect)
import K2C.Lut (TableRom (..))
import K2C.Pipe (pipeS, stageReg)
import K2C.Scatter (scatter)
import K2C.Stream (Stream, mapS, (|>))

-- | Quotient bits computed per pipeline stage of the division.
type StepsPerStage = 1

-- | Division stages: enough quotient bits for @y <= 2^fo@ (@fo + 1@ bits).
type DivStages fo = Div (fo + 1 + StepsPerStage - 1) StepsPerStage

-- | Quotient bits the pipeline computes (at least @fo + 1@).
type DivSteps fo = StepsPerStage * DivStages fo

-- | Register stages of 'softmaxS' over @n@ values: the beat, the maximum (a comparison
-- tree, one register a level), exponentials (the table indices, the table read, its data,
-- then a copy in the fabric), the sum (partial sums of 'SumGroup' values, then theirs),
-- numerators, the division stages.
type SoftmaxDepth n fo = SoftmaxFrontDepth n + SoftmaxDivideDepth fo

-- | The registers before the divisions: the beat, the maximum, the exponentials (four), the
-- sum (two).
type SoftmaxFrontDepth n = 1 + TreeDepth n + 6

-- | The registers of the divisions: the numerators, then the division stages.
type SoftmaxDivideDepth fo = 1 + DivStages fo

-- | Values the sum's first stage adds into each partial sum (two adder levels).
type SumGroup = 4

-- | Partial sums of @n + 1@ values, one per 'SumGroup' of them (visibly at least one).
type SumGroups n = 1 + Div n SumGroup

-- | Softmax of a beat; @w@ (given by a type application) is the width of the
-- sum and the division, wide enough for @2 e 2^fo + S@.
softmax
  :: forall w n m s eb ii fi oi fo
   . (KnownNat w, KnownNat n, KnownNat m, 1 <= m, KnownNat eb, KnownNat ii, KnownNat fi,
      KnownNat oi, KnownNat fo)
  => SNat s -> TableRom m (Signed eb) -> Vec (n + 1) (SFixed ii fi) -> Vec (n + 1) (SFixed oi fo)
softmax s table = \xs ->
  let es = exponentials @w s table xs
      total = sum es
   in map (\e -> saturateRaw ((shiftL e (natToNum @fo + 1) + total) `div` (2 * total))) es

-- | Steps 1 and 2: the table's @exp(-(m - r_i))@ of every input, in the sum's width.
exponentials
  :: forall w n m s eb ii fi
   . (KnownNat w, KnownNat n, KnownNat m, 1 <= m, KnownNat eb, KnownNat ii, KnownNat fi)
  => SNat s -> TableRom m (Signed eb) -> Vec (n + 1) (SFixed ii fi) -> Vec (n + 1) (Signed w)
exponentials s table xs = readTable @w table (tableIndices s (maximum xs) xs)

-- | Step 2's table index of every input: @min((m - r_i) >> s, nE - 1)@.
tableIndices
  :: forall n m s ii fi
   . (KnownNat n, KnownNat m, 1 <= m, KnownNat ii, KnownNat fi)
  => SNat s -> SFixed ii fi -> Vec (n + 1) (SFixed ii fi) -> Vec (n + 1) (Index m)
tableIndices s top xs = boundedIndices s top xs (clampBounds @m s xs)

-- | The width of a clamp bound ('clampBounds'): a value plus @(nE - 1) 2^s@, signed.
type BoundWidth m s ii fi = ii + fi + s + CLog 2 m + 1

-- | Each input's clamp bound for step 2, @r_i + (nE - 1) 2^s@: its index is the table's
-- last exactly when the maximum reaches the bound (@m - r_i >= (nE - 1) 2^s@, i.e.
-- @(m - r_i) >> s >= nE - 1@).
clampBounds
  :: forall m n s ii fi
   . (KnownNat n, KnownNat m, 1 <= m, KnownNat ii, KnownNat fi)
  => SNat s -> Vec (n + 1) (SFixed ii fi) -> Vec (n + 1) (Signed (BoundWidth m s ii fi))
clampBounds s@SNat = map (\r -> resize (unSF r) + shiftL (fromInteger (natToInteger @m - 1)) (snatToNum s))

-- | Step 2's table indices with the clamp decided on each input's 'clampBounds'.
boundedIndices
  :: forall n m s ii fi
   . (KnownNat n, KnownNat m, 1 <= m, KnownNat ii, KnownNat fi)
  => SNat s -> SFixed ii fi -> Vec (n + 1) (SFixed ii fi) -> Vec (n + 1) (Signed (BoundWidth m s ii fi))
  -> Vec (n + 1) (Index m)
boundedIndices s@SNat top = zipWith index
  where
    index r bound
      | resize (unSF top) >= bound = maxBound
      | otherwise                  = fromIntegral (shiftR (resize (unSF top) - resize (unSF r) :: Signed (ii + fi + 1)) (snatToNum s))

-- | Step 2's table reads, in the sum's width.
readTable :: forall w n m eb . (KnownNat w, KnownNat eb) => TableRom m (Signed eb) -> Vec n (Index m) -> Vec n (Signed w)
readTable (TableRom rom) = map (resize . rom)

-- | One division in progress: remainder, numerator bits still to shift in
-- (most significant first), quotient so far.
type Division w fo = (Unsigned (w + 1), BitVector (DivSteps fo), Unsigned (DivSteps fo))

-- | 'softmax' as a pipelined stream stage (see the module header); @t@ rides
-- along with each beat.
softmaxS
  :: forall w n m s eb ii fi oi fo t dom k
   . ( HiddenClockResetEnable dom
     , KnownNat w, KnownNat n, KnownNat m, 1 <= m, KnownNat eb, KnownNat ii, KnownNat fi
     , KnownNat oi, KnownNat fo, NFDataX t, k ~ DivStages fo, KnownNat k, 1 <= k )
  => SNat s -> TableRom m (Signed eb) -> Stream dom (Vec (n + 1) (SFixed ii fi), t) (Vec (n + 1) (SFixed oi fo), t)
softmaxS s table = pipeS (SNat @(SoftmaxDepth (n + 1) fo)) stages
  where
    stages input = fmap finish <$> (leToPlus @1 @k last <$> divisions)
      where
        starts = stageReg (fmap start <$> sumsOf @w s table input)
        divisions :: Signal dom (Vec k (Maybe (Vec (n + 1) (Division w fo), Unsigned (w + 1), t)))
        divisions = register (repeat Nothing) (advance <$> starts <*> divisions)
        advance
          :: Maybe (Vec (n + 1) (Division w fo), Unsigned (w + 1), t)
          -> Vec k (Maybe (Vec (n + 1) (Division w fo), Unsigned (w + 1), t))
          -> Vec k (Maybe (Vec (n + 1) (Division w fo), Unsigned (w + 1), t))
        advance incoming inFlight = map (fmap (\(ds, d, t) -> (map (steps d) ds, d, t))) (incoming +>> inFlight)

    start :: (Vec (n + 1) (Signed w), Signed w, t) -> (Vec (n + 1) (Division w fo), Unsigned (w + 1), t)
    start (es, total, t) = (map (begin total) es, divisorOf total, t)

    finish :: (Vec (n + 1) (Division w fo), Unsigned (w + 1), t) -> (Vec (n + 1) (SFixed oi fo), t)
    finish (ds, _, t) = (map quotient ds, t)

-- | 'softmaxS' with one division a cycle (see the module header): the same values, a beat
-- of @n + 1@ values every @n + 2@ cycles.
softmaxSerialS
  :: forall w n m s eb ii fi oi fo t dom k
   . ( HiddenClockResetEnable dom
     , KnownNat w, KnownNat n, KnownNat m, 1 <= m, KnownNat eb, KnownNat ii, KnownNat fi
     , KnownNat oi, KnownNat fo, NFDataX t, k ~ DivStages fo, KnownNat k, 1 <= k )
  => SNat s -> TableRom m (Signed eb) -> Stream dom (Vec (n + 1) (SFixed ii fi), t) (Vec (n + 1) (SFixed oi fo), t)
softmaxSerialS s table =
  pipeS (SNat @(SoftmaxFrontDepth (n + 1))) (fmap (fmap narrow) . sumsOf @w s table)
    |> mapS (\(es, total, t) -> map (\e -> (e, total, t)) es)
    |> scatter (SNat @(n + 1))
    |> pipeS (SNat @(SoftmaxDivideDepth fo)) divide
    |> collect (SNat @(n + 1))
    |> mapS (\ys -> (map fst ys, snd (last ys)))
  where
    -- the exponentials and their sum in the widths that hold them (the table's entries lie in
    -- [0, 2^(eb-1)), so n + 1 of them below 2^(eb - 1 + CLog 2 (n + 1))): the queue after
    -- the stages and the scattered beats hold these bits, not the division's width
    narrow :: (Vec (n + 1) (Signed w), Signed w, t) -> (Vec (n + 1) (Signed eb), Signed (eb + CLog 2 (n + 1)), t)
    narrow (es, total, t) = (map resize es, resize total, t)

    divide
      :: Signal dom (Maybe (Vec 1 (Signed eb, Signed (eb + CLog 2 (n + 1)), t)))
      -> Signal dom (Maybe (Vec 1 (SFixed oi fo, t)))
    divide input = fmap finish <$> (leToPlus @1 @k last <$> divisions)
      where
        starts = stageReg (fmap (\((e, total, t) :> Nil) -> (begin (resize total) (resize e), divisorOf @w (resize total), t)) <$> input)
        divisions :: Signal dom (Vec k (Maybe (Division w fo, Unsigned (w + 1), t)))
        divisions = register (repeat Nothing) (advance <$> starts <*> divisions)
        advance
          :: Maybe (Division w fo, Unsigned (w + 1), t)
          -> Vec k (Maybe (Division w fo, Unsigned (w + 1), t))
          -> Vec k (Maybe (Division w fo, Unsigned (w + 1), t))
        advance incoming inFlight = map (fmap (\(x, d, t) -> (steps d x, d, t))) (incoming +>> inFlight)

    finish :: (Division w fo, Unsigned (w + 1), t) -> Vec 1 (SFixed oi fo, t)
    finish (x, _, t) = (quotient x, t) :> Nil

-- | The stages before the divisions, 'SoftmaxFrontDepth' registers (see the module header):
-- each beat's exponentials and their sum, with its payload.
sumsOf
  :: forall w n m s eb ii fi t dom
   . ( HiddenClockResetEnable dom
     , KnownNat w, KnownNat n, KnownNat m, 1 <= m, KnownNat eb, KnownNat ii, KnownNat fi, NFDataX t )
  => SNat s -> TableRom m (Signed eb)
  -> Signal dom (Maybe (Vec (n + 1) (SFixed ii fi), t)) -> Signal dom (Maybe (Vec (n + 1) (Signed w), Signed w, t))
sumsOf s table input = sums
  where
    -- 'stageReg': valid bits reset, data not (a reset on the data would keep synthesis from
    -- absorbing the registers after the table read into the block RAM)
    -- Each value's clamp bound travels with the beat through the maximum's tree, computed
    -- beside its first level, so the index's clamp is a comparison of the maximum with the
    -- bound beside the subtraction, not after it (the transformer's attention softmax on
    -- ECP5: the maximum -> subtraction -> comparison -> index, 21 levels, 11.9 ns).
    tops = argmaxTree (fst . fst) (fmap (\beat -> ((beat, clampBounds @m s (fst beat)), ())) <$> stageReg input)
    -- The table indices registered before the reads: the maximum goes to every value's
    -- subtraction, and each index to its own block RAM, often far apart (mlp_tanh on ECP5:
    -- the maximum's register -> 4.9 ns of route -> subtraction, clip -> a block RAM's
    -- address, 12.2 ns).
    indices = stageReg (fmap (\(((xs, t), bounds), (top, _)) -> (boundedIndices s top xs bounds, t)) <$> tops)
    exps = stageReg (fmap (\(is, t) -> (readTable @w table is, t)) <$> indices)
    -- The table's read is a block RAM where synthesis absorbs the register above into it:
    -- its data output is slow, so it feeds nothing but this register (which the
    -- place-and-route flow moves into the block RAM's output register, fpga/bramregs.py).
    tableData = stageReg exps
    -- The block RAMs sit in their rows, often far from the adders: one more register, in
    -- the fabric, splits that route (mlp_tanh on ECP5: a table's output register -> 7.8 ns
    -- of route -> the first sum, 11.6 ns).
    tableNear = stageReg tableData
    -- the sum in two stages: the adder tree of ten 30-bit exponentials in one cycle would be
    -- mobilenet_digits' critical path (four carry chains, 15 ns on ECP5)
    partials = stageReg (fmap (\(es, t) -> (es, groupSums es, t)) <$> tableNear)
    sums = stageReg (fmap (\(es, ps, t) -> (es, sum ps, t)) <$> partials)

    -- The sum's first stage: each 'SumGroup' of consecutive values added in a tree of two levels.
    groupSums :: Vec (n + 1) (Signed w) -> Vec (SumGroups n) (Signed w)
    groupSums es = map group indicesI
      where
        group g = (at (base + 0) + at (base + 1)) + (at (base + 2) + at (base + 3))
          where base = fromEnum g * natToNum @SumGroup
        at i = if i <= natToNum @n then es !! i else 0

-- | Step 4's division of @e@ by the sum @S@ as it starts: the numerator @2 e 2^fo + S@.
begin :: forall w fo . (KnownNat w, KnownNat fo) => Signed w -> Signed w -> Division w fo
begin total e = (resize (shiftR n steps'), pack (resize n :: Unsigned (DivSteps fo)), 0)
  where
    n = bitCoerce (shiftL e (natToNum @fo + 1) + total) :: Unsigned w
    steps' = natToNum @(DivSteps fo) :: Int

-- | Step 4's divisor @2 S@.
divisorOf :: forall w . KnownNat w => Signed w -> Unsigned (w + 1)
divisorOf total = resize (bitCoerce (2 * total) :: Unsigned w)

-- | 'StepsPerStage' steps of restoring division by @d@.
steps :: forall w fo . (KnownNat w, KnownNat fo) => Unsigned (w + 1) -> Division w fo -> Division w fo
steps d x = foldl (\acc _ -> step d acc) x (replicate (SNat @StepsPerStage) ())

-- | One subtraction decides and gives the new remainder (its sign is the comparison), so a
-- step is one carry chain and a multiplexer.
step :: forall w fo . (KnownNat w, KnownNat fo) => Unsigned (w + 1) -> Division w fo -> Division w fo
step d (r, bits, q)
  | msb diff == 0 = (resize (bitCoerce diff :: Unsigned (w + 2)), shiftL bits 1, shiftL q 1 .|. 1)
  | otherwise     = (r', shiftL bits 1, shiftL q 1)
  where
    r' = shiftL r 1 .|. resize (unpack (pack (msb bits)) :: Unsigned 1)
    diff = bitCoerce (resize r' :: Unsigned (w + 2)) - bitCoerce (resize d :: Unsigned (w + 2)) :: Signed (w + 2)

-- | A finished division's quotient, saturated to the output format.
quotient :: forall w fo oi . (KnownNat w, KnownNat fo, KnownNat oi) => Division w fo -> SFixed oi fo
quotient (_, _, q) = saturateRaw @w (bitCoerce (resize q :: Unsigned w))

-- | A raw result saturated to the output format.
saturateRaw :: forall w oi fo . (KnownNat w, KnownNat oi, KnownNat fo) => Signed w -> SFixed oi fo
saturateRaw q
  | wide > resize hi = maxBound
  | wide < resize lo = minBound
  | otherwise        = sf (SNat @fo) (resize q)
  where
    wide = resize q :: Signed (w + oi + fo)
    hi = maxBound :: Signed (oi + fo)
    lo = minBound :: Signed (oi + fo)
