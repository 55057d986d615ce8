{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables, RankNTypes,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType, TypeFamilies,
             AllowAmbiguousTypes, DeriveGeneric, DeriveAnyClass #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=16 #-}
{-|
A training core's blocks: a Dense layer that runs forward, backward and its own SGD update
on weights in block RAM, and the softmax with cross-entropy at the output
(docs/guide/training.md, "The training core"; the arithmetic is the golden trainer's,
keras2clash/train/golden.py, bit for bit).

= Arithmetic

Every value is a raw two's-complement integer whose fraction bits the compiler knows; it
gives each layer the shifts that align them ('LayerArith'). Sums and products are exact;
a tensor is rounded once where it is stored: 'roundTo' (round half up, saturate), the
golden trainer's @requantize_to@. With @x@ the layer's input (the previous layer's output),
@d@ the gradient of the loss by its pre-activation:

* forward, per output @j@: @z_j = roundTo(sum_k x_k w_kj + b_j)@ to the activation
  format, @y_j = f(z_j)@ (the compiler's function: relu, linear, a table);
* backward, per input @k@: @back_k = sum_j w_kj d_j@ (the weights before this step's
  update), the previous layer's gradient @roundTo(back_k f'(x_k))@ ('Deriv': @f'@ from
  the stored output alone);
* update ('sgd'): @w_kj <- roundTo(w_kj - s x_k d_j)@, @b_j <- roundTo(b_j - s d_j)@, @s@
  the update's scale (@scaleRaw * 2^-frac@; the fraction is in the shifts); with momentum
  @m@ ('momentum'): @v_kj <- roundTo(m v_kj - s x_k d_j)@ to the velocity format, then
  @w_kj <- roundTo(w_kj + v_kj)@ (the biases the same with @d_j@).

= Hardware

A layer of @nIn@ inputs and @g@ groups of @pe@ outputs keeps its weights in a memory of
@nIn * g@ words of @pe@ weights ('bankedRam': in banks a block RAM deep), word @k * g + j@
the weights of input @k@ to group @j@ (outputs past the layer's are zero), its biases in @g@
words, its input in a block RAM of words of @pin@ values (as the previous layer writes them,
one group a word), and the gradient of its output in @g@ words. @pe@ multipliers serve both
directions (the input forward, the gradient backward, each times a weight) and @pe@ more the
update's @x d@.

The layer's phases: 'Fill' (input words arrive), 'Fwd' (one word of weights a cycle, group
by group, @k@ fastest: @nIn * g@ cycles), 'DFill' (its output's gradient arrives, a value a
cycle), 'Bwd' (one word a cycle, @k@ by @k@, the group fastest: @nIn * g@ cycles; each weight
read, updated and written back in one pass, its old value into the backward sum), 'Drain'
(the last writes land), then 'Fill' again.

= Exact timing

A layer entering 'Fwd' in cycle @t@ writes its last output word in cycle
@t + nIn g - 1 + 'FwdLatency'@, and the next layer enters 'Fwd' the cycle after. A layer
entering 'Bwd' in @t@ gives the last gradient of its input in
@t + nIn g - 1 + 'BwdLatency' pe@ and is back in 'Fill' in @t + nIn g + 'drainCycles' u@
(keras2clash/train/hardware.py's cycle model counts the same).
-}
module K2C.Train
  ( LayerArith (..)
  , Deriv (..)
  , Phase (..)
  , TrainLayerOut (..)
  , HostWord
  , Command (..)
  , HostIn (..)
  , trainLayer
  , softmaxLoss
  , mseLoss
  , MseLatency
  , hostControl
  , hostAnswers
  , nextStart
  , (.<|>.)
  , roundTo
  , FwdLatency
  , BwdLatency
  , drainCycles
  , Update (..)
  , UpdateIn
  , MomentumArith (..)
  , sgd
  , momentum
  , batched
  , LossLatency
  , Banks (..)
  , bankedRam
  ) where

import Clash.Prelude
import Control.Applicative ((<|>))
import Data.Maybe (isJust)

import K2C.Lut (TableRom (..))
import K2C.Pipe (stageReg)
import K2C.Softmax (DivSteps, Division, divisorOf, quotient)
import qualified K2C.Softmax as Softmax
import K2C.Tree (TreeDepth, treeFold)

-- | The alignments of a layer's arithmetic (left shifts onto a common number of fraction
-- bits, and the roundings back), decided by the compiler from the formats.
data LayerArith = LayerArith
  { biasShift  :: Int      -- ^ the bias onto the forward sum's fraction (x.frac + w.frac)
  , zShift     :: Int      -- ^ the forward sum's fraction minus the activation format's
  , wStepShift :: Int      -- ^ @x d scaleRaw@ onto the update's common fraction
  , wKeepShift :: Int      -- ^ the weight onto it (and the rounding back)
  , bStepShift :: Int      -- ^ @d scaleRaw@ onto the bias update's common fraction
  , bKeepShift :: Int      -- ^ the bias onto it (and the rounding back)
  , scaleRaw   :: Integer  -- ^ the update's scale, odd (1: a power of two, in the shifts)
  , backShift  :: Int      -- ^ the fraction of @back f'@ minus the previous gradient format's
  }

-- | The derivative of the input's activation (the previous layer's), from its output @x@
-- alone: linear 1; relu @x > 0@; tanh @1 - x^2@ and sigmoid @x (1 - x)@, @one@ the raw 1.
data Deriv = Pass | Positive | Tanh Integer | Sigmoid Integer

-- | What a layer is doing.
data Phase = Fill | Fwd | DFill | Bwd | Drain | Read | Load
  deriving (Eq, Show, Generic, NFDataX)

-- | The host's words: a raw value sign-extended, a label, a class, a command.
type HostWord = Signed 32

-- | What the host asks of the core, the first word of a message ('hostControl').
data Command = TrainCmd | InferCmd | ReadCmd | WriteCmd | AccumulateCmd
  deriving (Eq, Show, Generic, NFDataX)

-- | What the host's control tells every layer: whether the sample trains and whether it
-- updates the weights (the last of a batch; both held through it), the start of a read or a
-- write of the weights (a pulse to the first layer; each next layer starts as the one before
-- ends), the host taking a read value, a value to write.
data HostIn dom = HostIn
  { hostTrain     :: Signal dom Bool
  , hostUpdate    :: Signal dom Bool
  , hostReadReady :: Signal dom Bool
  , hostValue     :: Signal dom (Maybe HostWord)
  }

-- | Cycles from a forward operation's issue to its group's output word (the last operation
-- of a group): the reads, the input's lane, the operands' registers, the products, the sum,
-- the rounding, the activation.
type FwdLatency = 11

-- | Cycles from a backward operation's issue to the previous layer's gradient (the last group
-- of an input): the reads, the input's lane, the operands, the products, the tree over @pe@
-- products, the sum over the groups, the derivative's product and its rounding.
type BwdLatency pe = 9 + TreeDepth pe

-- | Cycles after the last backward issue before the layer takes input again: the update's
-- writes land (issue, read, the input's lane, operands, products; the update's cycles).
drainCycles :: Update dom n g pe wb bb xd gb -> Int
drainCycles u = 5 + updateCycles u

-- | What the backward pass gives a layer's update, a word a cycle: the word's address, its
-- group, whether it updates the group's biases, the old weights and biases, @x d@ and @d@ per
-- lane.
type UpdateIn n g pe wb bb xd gb =
  (Index n, Index g, Bool, Vec pe (Signed wb), Vec pe (Signed bb), Vec pe (Signed xd), Vec pe (Signed gb))

-- | A layer's update rule ('sgd', 'momentum'): from the backward products to the writes of the
-- new weight and bias words, 'updateCycles' later.
data Update dom n g pe wb bb xd gb = Update
  { updateCycles :: Int
  , updateWrites
      :: Signal dom (Maybe (UpdateIn n g pe wb bb xd gb))
      -> (Signal dom (Maybe (Index n, Vec pe (Signed wb))), Signal dom (Maybe (Index g, Vec pe (Signed bb))))
  }

-- | Cycles from the last output word of the network's last layer (@n + 1@ classes, the
-- probabilities' @fo@ fraction bits) to the first gradient ('softmaxLoss').
type LossLatency n fo = 1 + (n + 1) + (n + 1 + 3) + fo + 4

-- | @v@ (a value with @f@ fraction bits) with @f - s@ fraction bits in @m@ bits: for @s > 0@
-- rounded half up (the dropped bits' half added, then an arithmetic shift, a floor), for
-- @s <= 0@ shifted left (exact); saturated to @m@ bits. @u@ holds the value with a bit to
-- spare for the rounding's addition. The saturation asks whether the bits above the result's
-- are all copies of its sign (an equality, a tree of LUTs), not two comparisons: the
-- rounding's addition is the one carry chain.
roundTo :: forall u m . (KnownNat u, KnownNat m) => Int -> Signed u -> Signed m
roundTo s v = saturate (if s > 0 then shiftR (wide + bit (s - 1)) s else shiftL wide (negate s))
  where
    wide = resize v :: Signed (u + 1)
    saturate r
      | resize narrow == r = narrow
      | r < 0 = minBound
      | otherwise = maxBound
      where
        narrow = resize r :: Signed m

-- | One operation of a layer's loop: forward or backward, its input @k@ (its word and lane
-- in the input buffer), its group, whether it starts or ends a sum, and (backward) whether it
-- updates the group's biases (@k = 0@).
data Op nIn nInW pin g = Op
  { opFwd   :: Bool
  , opAddress :: Index (nIn * g)
  , opWord  :: Index nInW
  , opLane  :: Index pin
  , opGroup :: Index g
  , opFirst :: Bool
  , opLast  :: Bool
  , opBias  :: Bool
  }
  deriving (Generic, NFDataX)

-- | What the controller sees in a cycle: an input word, a gradient value, whether the sample
-- trains, the start of a transfer, the host taking a value read, a value to write.
data Events = Events Bool Bool Bool (Maybe Command) Bool Bool

-- | The controller's state: the phase, the loop's counters and the weight address; in a
-- transfer the lane of the word, whether it is in the biases, how far the word read is (its
-- address set, its data out of the block RAM, out of its bank's register, registered).
data Ctl nIn nInW pin g pe nOut = Ctl
  { phase   :: Phase
  , filled  :: Index nInW
  , kIdx    :: Index nIn
  , kWord   :: Index nInW
  , kLane   :: Index pin
  , gIdx    :: Index g
  , address :: Index (nIn * g)
  , rowBase :: Index (nIn * g)
  , dCount  :: Index nOut
  , drained :: Index 32
  , lane    :: Index pe
  , inBias  :: Bool
  , primed  :: Index 5
  }
  deriving (Generic, NFDataX)

-- | A layer's outputs: its output words (a group's @pe@ values, as the next layer's input
-- buffer takes them), the gradient of its input (a value a cycle), whether it takes input,
-- its phase, the updates of its weight and bias memories (a simulation sees the weights
-- after each step in them: each step writes every word once, in address order), a value
-- of its weights for the host ('Read'), and the end of a read or a write (a pulse).
data TrainLayerOut dom g pe nIn gpb ab wb bb = TrainLayerOut
  { layerOut     :: Signal dom (Maybe (Vec pe (Signed ab)))
  , layerBack    :: Signal dom (Maybe (Signed gpb))
  , layerReady   :: Signal dom Bool
  , layerPhase   :: Signal dom Phase
  , weightWrites :: Signal dom (Maybe (Index (nIn * g), Vec pe (Signed wb)))
  , biasWrites   :: Signal dom (Maybe (Index g, Vec pe (Signed bb)))
  , readValue    :: Signal dom (Maybe (HostWord, Bool))
  , transferDone :: Signal dom Bool
  }

-- | A Dense layer that trains (the module header): @nIn@ inputs arriving as words of @pin@
-- values, @nOut@ outputs in @g@ groups of @pe@; input @xb@ bits, weights @wb@, biases @bb@,
-- activations @ab@, its gradient @gb@, the previous layer's gradient @gpb@; @fu@ holds the
-- forward sum (with the bias), @bu@ the backward sum, @du@ the backward sum times the
-- derivative (@bu@ itself where the derivative is a choice, not a product). @update@: the
-- rule that writes the new weights ('sgd', 'momentum').
trainLayer
  :: forall nIn nInW pin g pe nOut xb wb bb ab gb gpb fu bu du wnb wbd bnb bbd dom
   . ( HiddenClockResetEnable dom
     , KnownNat wnb, 1 <= wnb, KnownNat wbd, 1 <= wbd, KnownNat bnb, 1 <= bnb, KnownNat bbd, 1 <= bbd, 1 <= nIn * g
     , KnownNat nIn, 1 <= nIn, KnownNat nInW, 1 <= nInW, KnownNat pin, 1 <= pin
     , KnownNat g, 1 <= g, KnownNat pe, 1 <= pe, KnownNat nOut, 1 <= nOut
     , KnownNat xb, KnownNat wb, KnownNat bb, KnownNat ab, KnownNat gb, KnownNat gpb
     , KnownNat fu, KnownNat bu, KnownNat du )
  => LayerArith
  -> (Signed ab -> Signed ab)
  -> Deriv
  -> Banks wnb wbd
  -> Banks bnb bbd
  -> Update dom (nIn * g) g pe wb bb (xb + gb) gb
  -> HostIn dom
  -> Signal dom (Maybe Command)
  -> Signal dom (Maybe (Vec pin (Signed xb)))
  -> Signal dom (Maybe (Signed gb))
  -> TrainLayerOut dom g pe nIn gpb ab wb bb
trainLayer arith activate deriv weightBanks biasBanks update host start input grad =
  TrainLayerOut outWord backOut ((== Fill) . phase <$> ctl) (phase <$> ctl) wWrite bWrite readOut done
  where
    ctl :: Signal dom (Ctl nIn nInW pin g pe nOut)
    ctl = register (Ctl Fill 0 0 0 0 0 0 0 0 0 0 False 0) (control <$> ctl <*> events)
    events = Events <$> (isJust <$> input) <*> (isJust <$> grad) <*> hostTrain host <*> start
                    <*> taken <*> (isJust <$> loadIn)
    issued :: Signal dom (Maybe (Op nIn nInW pin g))
    issued = issue <$> ctl

    -- the memories, each read's data registered as it leaves its block RAM and once more
    -- (cycle 3: the weights and biases in banks, 'bankedRam')
    xWrite = (\c i -> (\ws -> (filled c, ws)) <$> i) <$> ctl <*> input
    xWord = delay (repeat 0) (delay (repeat 0) (blockRam (repeat @nInW (repeat @pin 0)) (opWord' <$> issued) xWrite))
    weightBits = bankedRam weightBanks (address <$> ctl) (fmap packW <$> (wWrite .<|>. wLoad))
    biasBits = bankedRam biasBanks (gIdx <$> ctl) (fmap packB <$> (bWrite .<|>. bLoad))
    weights = unpack <$> weightBits :: Signal dom (Vec pe (Signed wb))
    biases = unpack <$> biasBits :: Signal dom (Vec pe (Signed bb))
    dWords = delay (repeat 0) (delay (repeat 0) (blockRam (repeat @g (repeat @pe 0)) (gIdx <$> ctl) dWrite))
    packW (a, ws) = (a, pack ws)
    packB (a, bs) = (a, pack bs)
    opWord' = maybe 0 opWord

    -- the gradient arrives a value a cycle; a word is written as its group fills
    gathering = register (0 :: Index g, 0 :: Index pe, repeat @pe (0 :: Signed gb)) (snd <$> gathered)
    gathered = gather <$> gathering <*> grad
    dWrite = fst <$> gathered
    gather held Nothing = (Nothing, held)
    gather (word, lane, vals) (Just v) = (if full then Just (word, vals') else Nothing, next)
      where
        vals' = replace lane v vals
        lastValue = word == lastGroup && lane == lastGroupLane
        full = lane == maxBound || lastValue
        next
          | lastValue = (0, 0, repeat 0)
          | full      = (word + 1, 0, repeat 0)
          | otherwise = (word, lane + 1, vals')

    -- cycle 3: the reads' data with their operation; the input's lane picked (cycle 4: a
    -- register of its own, as the input is an operand of every lane's multiplier); each lane's
    -- operand chosen (cycle 5)
    op3 = alongRead issued
    raw = (\o xs ws ds bs -> (\op -> (op, xs, ws, ds, bs)) <$> o) <$> op3 <*> xWord <*> weights <*> dWords <*> biases
    laned = register Nothing (fmap pickLane <$> raw)
    pickLane (op, xs, ws, ds, bs) = (op, xs !! opLane op, ws, ds, bs)
    operands = stageReg (fmap pick <$> laned)
    pick (op, x, ws, ds, bs) = (op, x, ws, ds, bs, map (\d -> if opFwd op then resize x else resize d) ds)

    -- cycle 5: the products (cycle 6): one multiplier per lane for both directions, its operand
    -- as wide as the wider of the input and the gradient (18 bits each fit one MULT18X18D), and
    -- the update's; the derivative's factor of the input. The operands' and the products' data
    -- registers have no reset ('stageReg'), so place and route moves them into the multiplier
    -- blocks' own registers.
    products = stageReg (fmap multiply <$> operands)
    multiply (op, x, ws, ds, bs, as) = (op, x, ws, ds, bs, zipWith mul as ws, map (mul x) ds, derivFactor deriv x)
      :: (Op nIn nInW pin g, Signed xb, Vec pe (Signed wb), Vec pe (Signed gb), Vec pe (Signed bb), Vec pe (Signed (Max xb gb + wb)), Vec pe (Signed (xb + gb)), Signed (2 * xb + 2))

    -- forward, cycle 6: the sums (cycle 7); the bias added (8); the rounding (9); the
    -- activation (10: a table's block RAM read) and its register (11: the block RAM's output)
    sums = register (repeat 0) (accumulate <$> products <*> sums)
    accumulate (Just (op, _, _, _, _, ps, _, _)) acc | opFwd op =
      zipWith (\a p -> (if opFirst op then 0 else a) + resize p) acc ps
    accumulate _ acc = acc
    finishing = register Nothing (fwdLast <$> products)
    fwdLast (Just (op, _, _, _, bs, _, _, _)) | opFwd op && opLast op = Just bs
    fwdLast _ = Nothing
    biased = register Nothing (fmap <$> (addBias <$> sums) <*> finishing)
    addBias acc bs = zipWith (\a b -> a + shiftL (resize b) (biasShift arith)) acc bs :: Vec pe (Signed fu)
    zs = register Nothing (fmap (map (roundTo @fu @ab (zShift arith))) <$> biased)
    activated = register Nothing (fmap (map activate) <$> zs)
    outWord = register Nothing activated

    -- backward, cycle 6: the update (its cycles), written
    (wWrite, bWrite) = updateWrites update ((>>= toUpdate) <$> products)
    toUpdate (op, _, ws, ds, bs, _, xds, _)
      | opFwd op = Nothing
      | otherwise = Just (opAddress op, opGroup op, opBias op, ws, bs, xds, ds)

    -- backward, cycles 6 .. 6 + TreeDepth pe: the tree over a word's products; then the sum
    -- over the groups, the derivative's product, the rounding
    backTree = treeFold (+) 0 ((>>= backLeaves) <$> products)
    backLeaves (op, x, _, _, _, ps, _, f)
      | opFwd op = Nothing
      | otherwise = Just ((opFirst op, opLast op, x, f), map resize ps :: Vec pe (Signed bu))
    backSum = register Nothing (accumulateBack <$> backTree <*> backSum)
    accumulateBack (Just ((first, lst, x, f), s)) prev =
      Just (lst, x, f, (if first then 0 else maybe 0 (\(_, _, _, v) -> v) prev) + s)
    accumulateBack Nothing prev = prev
    backDone = register Nothing (finishedBack <$> backTree)
    finishedBack (Just ((_, True, _, _), _)) = Just ()
    finishedBack _ = Nothing
    derived = register Nothing ((\d s -> d >> fmap (\(_, x, f, back) -> resize (applyDeriv deriv x f back) :: Signed du) s) <$> backDone <*> backSum)
    backOut = register Nothing (fmap (roundTo @du @gpb (backShift arith)) <$> derived)

    -- the host's reads and writes of the memories: a value a cycle, word by word in address
    -- order (the weights, then the biases), the outputs past the layer's skipped
    loading = (== Load) . phase <$> ctl
    loadIn = mux loading (hostValue host) (pure Nothing)
    -- a value read leaves from a register; its word is registered once more after the banks'
    -- multiplexer, as a row that moves up a value each time one is taken, so the value that
    -- leaves is always the row's head (no multiplexer of the lanes on the way out): a word's
    -- first value is there five cycles after its address, each next the cycle after the one
    -- before was taken
    readRow = register (repeat 0) (nextRow <$> ctl <*> taken <*> weights <*> biases <*> readRow)
    nextRow c t ws bs row
      | phase c == Read && primed c == maxBound - 1 = if inBias c then map resize bs else map resize ws
      | t = row <<+ 0
      | otherwise = row
      :: Vec pe (Signed (Max wb bb))
    readOut = register Nothing (mux taken (pure Nothing) (readOf <$> ctl <*> readRow))
    readOf c row
      | phase c == Read && primed c == maxBound = Just (resize (row !! (0 :: Int)), lastValue c)
      | otherwise = Nothing
    taken = (isJust <$> readOut) .&&. hostReadReady host
    done = (taken .||. (isJust <$> loadIn)) .&&. (lastValue <$> ctl)
    gathered' = register (repeat @pe (0 :: HostWord)) (gatherLoad <$> ctl <*> loadIn <*> gathered')
    gatherLoad c (Just v) vals = if lastLane c then repeat 0 else replace (lane c) v vals
    gatherLoad _ Nothing vals = vals
    loadWord = (\c v vals -> (\x -> (c, replace (lane c) x vals)) <$> v) <$> ctl <*> loadIn <*> gathered'
    wLoad = (>>= \(c, vals) -> if lastLane c && not (inBias c) then Just (address c, map resize vals) else Nothing) <$> loadWord
    bLoad = (>>= \(c, vals) -> if lastLane c && inBias c then Just (gIdx c, map resize vals) else Nothing) <$> loadWord

    -- the group and the lane of the layer's last output (constants: a position compares
    -- with them, no product of a group and the lanes in the hardware)
    lastGroup = fromInteger ((natToNum @nOut - 1) `div` natToNum @pe) :: Index g
    lastGroupLane = fromInteger ((natToNum @nOut - 1) `mod` natToNum @pe) :: Index pe

    -- the controller
    issue :: Ctl nIn nInW pin g pe nOut -> Maybe (Op nIn nInW pin g)
    issue c = case phase c of
      Fwd -> Just (Op True (address c) (kWord c) (kLane c) (gIdx c) (kIdx c == 0) (kIdx c == maxBound) False)
      Bwd -> Just (Op False (address c) (kWord c) (kLane c) (gIdx c) (gIdx c == 0) (gIdx c == maxBound) (kIdx c == 0))
      _ -> Nothing

    control :: Ctl nIn nInW pin g pe nOut -> Events -> Ctl nIn nInW pin g pe nOut
    control c (Events inputValid gradValid training starting readTaken loadValid) = case phase c of
      Fill
        | starting == Just ReadCmd -> c { phase = Read }
        | starting == Just WriteCmd -> c { phase = Load }
        | not inputValid -> c
        | filled c == maxBound -> c { phase = Fwd, filled = 0 }
        | otherwise -> c { filled = filled c + 1 }
      Fwd
        | kIdx c /= maxBound -> nextK c { address = address c + natToNum @g }
        | gIdx c /= maxBound -> firstK c { gIdx = gIdx c + 1, address = rowBase c + 1, rowBase = rowBase c + 1 }
        | otherwise -> firstK c { phase = if training then DFill else Fill, gIdx = 0, address = 0, rowBase = 0 }
      DFill
        | not gradValid -> c
        | dCount c == maxBound -> c { phase = Bwd, dCount = 0 }
        | otherwise -> c { dCount = dCount c + 1 }
      Bwd
        | gIdx c /= maxBound -> c { gIdx = gIdx c + 1, address = address c + 1 }
        | kIdx c /= maxBound -> nextK c { gIdx = 0, address = address c + 1 }
        | otherwise -> firstK c { phase = Drain, gIdx = 0, address = 0, drained = 0 }
      Drain
        | drained c == fromIntegral (drainCycles update) -> c { phase = Fill }
        | otherwise -> c { drained = drained c + 1 }
      Read
        | primed c /= maxBound -> c { primed = primed c + 1 }
        | readTaken -> (nextValue c) { primed = if lastLane c then 0 else maxBound }
        | otherwise -> c
      Load
        | loadValid -> nextValue c
        | otherwise -> c

    -- the next value of a transfer: the next lane, the next word's first, the biases' first,
    -- or (after the last bias) back to 'Fill'
    nextValue :: Ctl nIn nInW pin g pe nOut -> Ctl nIn nInW pin g pe nOut
    nextValue c
      | not (lastLane c) = c { lane = lane c + 1 }
      | lastValue c = c { phase = Fill, lane = 0, gIdx = 0, address = 0, inBias = False }
      | inBias c = c { lane = 0, gIdx = gIdx c + 1 }
      | address c == maxBound = c { lane = 0, gIdx = 0, inBias = True }
      | otherwise = c { lane = 0, address = address c + 1, gIdx = if gIdx c == maxBound then 0 else gIdx c + 1 }

    -- the last of a word's values that are the layer's outputs, the last value of a transfer
    lastLane, lastValue :: Ctl nIn nInW pin g pe nOut -> Bool
    lastLane c = lane c == maxBound || (gIdx c == lastGroup && lane c == lastGroupLane)
    lastValue c = inBias c && gIdx c == maxBound && lastLane c

    nextK, firstK :: Ctl nIn nInW pin g pe nOut -> Ctl nIn nInW pin g pe nOut
    nextK c
      | kLane c == maxBound = c { kIdx = kIdx c + 1, kWord = kWord c + 1, kLane = 0 }
      | otherwise = c { kIdx = kIdx c + 1, kLane = kLane c + 1 }
    firstK c = c { kIdx = 0, kWord = 0, kLane = 0 }

-- | The plain update, in @uu@ bits: @w <- roundTo(w - s x d)@, @b <- roundTo(b - s d)@; the
-- exact values (a cycle), rounded (a cycle), written.
sgd
  :: forall uu n g pe wb bb xd gb dom
   . ( HiddenClockResetEnable dom, KnownNat uu, KnownNat n, KnownNat g, KnownNat pe
     , KnownNat wb, KnownNat bb, KnownNat xd, KnownNat gb )
  => LayerArith
  -> Update dom n g pe wb bb xd gb
sgd arith = Update 2 writes
  where
    writes upd = (wWrite, bWrite)
      where
        diffs = register Nothing (fmap exact <$> upd)
        exact (a, j, bias, ws, bs, xds, ds) =
          ( a, j, bias
          , zipWith (stepped @uu (wStepShift arith) (wKeepShift arith) 1 (scaleRaw arith)) ws xds
          , zipWith (stepped @uu (bStepShift arith) (bKeepShift arith) 1 (scaleRaw arith)) bs ds )
        wWrite = register Nothing (fmap (\(a, _, _, ws', _) -> (a, map (roundTo @uu (wKeepShift arith)) ws')) <$> diffs)
        bWrite = register Nothing ((>>= \(_, j, bias, _, bs') -> if bias then Just (j, map (roundTo @uu (bKeepShift arith)) bs') else Nothing) <$> diffs)

-- | @keepRaw old@ and @scaleRaw g@ on a common fraction (their shifts), @g@'s taken away:
-- exact in @u@ bits.
stepped :: forall u v t . (KnownNat u, KnownNat v, KnownNat t) => Int -> Int -> Integer -> Integer -> Signed v -> Signed t -> Signed u
stepped stepShift keepShift keepRaw stepRaw old g =
  shiftL (resize old * fromInteger keepRaw) keepShift - shiftL (resize g * fromInteger stepRaw) stepShift

-- | The momentum's alignments: the velocity @v <- roundTo(m v - s x d)@ (@m = momentumRaw
-- 2^-frac@, the fraction in the shifts), then @w <- roundTo(w + v)@; the biases' the same
-- with @d@.
data MomentumArith = MomentumArith
  { momentumRaw :: Integer  -- ^ the momentum, odd (1: a power of two, in the shifts)
  , wVelKeep  :: Int  -- ^ @m v@ onto the velocity's common fraction
  , wVelStep  :: Int  -- ^ @x d scaleRaw@ onto it
  , wVelRound :: Int  -- ^ the common fraction minus the velocity format's
  , wNewW     :: Int  -- ^ the weight onto the new weight's common fraction (and the rounding back)
  , wNewV     :: Int  -- ^ the velocity onto it
  , bVelKeep  :: Int
  , bVelStep  :: Int
  , bVelRound :: Int
  , bNewB     :: Int
  , bNewV     :: Int
  }

-- | SGD with momentum (Keras' SGD): each word's velocities in a block RAM of their own
-- (@vb@ bits, initially the files', 'bankedRam'), read as the backward products arrive; the
-- exact velocities in @vu@ bits, the new weights in @nu@. Cycles: the address registered (1),
-- the reads (2), their data registered as they leave the block RAMs (3), chosen and
-- registered (4), the exact velocities (5), rounded (6) and written, the new weights' exact
-- values (7), rounded (8) and written. @pe@ products @m v@ a lane for the weights and @pe@
-- for the biases (none when @m@ is a power of two).
momentum
  :: forall vb vu nu n g pe wb bb xd gb wnb wbd bnb bbd dom
   . ( HiddenClockResetEnable dom, KnownNat vb, KnownNat vu, KnownNat nu, KnownNat n, 1 <= n, KnownNat g
     , 1 <= g, KnownNat pe, KnownNat wb, KnownNat bb, KnownNat xd, KnownNat gb
     , KnownNat wnb, 1 <= wnb, KnownNat wbd, 1 <= wbd, KnownNat bnb, 1 <= bnb, KnownNat bbd, 1 <= bbd )
  => LayerArith
  -> MomentumArith
  -> Banks wnb wbd
  -> Banks bnb bbd
  -> Update dom n g pe wb bb xd gb
momentum arith m wVelBanks bVelBanks = Update 8 writes
  where
    writes upd = (wWrite, bWrite)
      where
        velW = unpack <$> bankedRam wVelBanks (maybe 0 (\(a, _, _, _, _, _, _) -> a) <$> upd) (fmap packV <$> velWWrite)
        velB = unpack <$> bankedRam bVelBanks (maybe 0 (\(_, j, _, _, _, _, _) -> j) <$> upd) (fmap packV <$> velBWrite)
        packV (a, vs) = (a, pack vs)
        held = alongRead upd
        withV = register Nothing ((\h vw vbs -> (\u -> (u, vw, vbs)) <$> h) <$> held <*> velW <*> velB)
        velExact = register Nothing (fmap velocity <$> withV)
        velocity ((a, j, bias, ws, bs, xds, ds), vw, vbs) =
          ( a, j, bias, ws, bs
          , zipWith (stepped @vu (wVelStep m) (wVelKeep m) (momentumRaw m) (scaleRaw arith)) (vw :: Vec pe (Signed vb)) xds
          , zipWith (stepped @vu (bVelStep m) (bVelKeep m) (momentumRaw m) (scaleRaw arith)) (vbs :: Vec pe (Signed vb)) ds )
        velNew = register Nothing (fmap rounded <$> velExact)
        rounded (a, j, bias, ws, bs, vw, vbs) =
          (a, j, bias, ws, bs, map (roundTo @vu @vb (wVelRound m)) vw, map (roundTo @vu @vb (bVelRound m)) vbs)
        velWWrite = fmap (\(a, _, _, _, _, vw, _) -> (a, vw)) <$> velNew
        velBWrite = (>>= \(_, j, bias, _, _, _, vbs) -> if bias then Just (j, vbs) else Nothing) <$> velNew
        newExact = register Nothing (fmap added <$> velNew)
        added (a, j, bias, ws, bs, vw, vbs) =
          ( a, j, bias
          , zipWith (\w v -> shiftL (resize w) (wNewW m) + shiftL (resize v) (wNewV m) :: Signed nu) ws vw
          , zipWith (\b v -> shiftL (resize b) (bNewB m) + shiftL (resize v) (bNewV m) :: Signed nu) bs vbs )
        wWrite = register Nothing (fmap (\(a, _, _, ws', _) -> (a, map (roundTo @nu (wNewW m)) ws')) <$> newExact)
        bWrite = register Nothing ((>>= \(_, j, bias, _, bs') -> if bias then Just (j, map (roundTo @nu (bNewB m)) bs') else Nothing) <$> newExact)

-- | Gradients summed over a batch: each word's sums of @x d@ (and its biases' of @d@) in a block
-- RAM of their own (@au@ and @bau@ bits, initially the files', 'bankedRam'), read as the
-- backward products arrive. A sample that does not update (@updating@ low: 'AccumulateCmd')
-- adds its products to them; one that does (the batch's last) gives the sums with its own
-- products to the update @inner@ and sets them back to zero. Cycles: the address registered
-- (1), the reads (2), their data registered as they leave the block RAMs (3), chosen and
-- registered (4), the sums (5), then @inner@'s.
batched
  :: forall au bau n g pe wb bb xd gb wnb wbd bnb bbd dom
   . ( HiddenClockResetEnable dom, KnownNat au, KnownNat bau, KnownNat n, 1 <= n, KnownNat g, 1 <= g
     , KnownNat pe, KnownNat xd, KnownNat gb
     , KnownNat wnb, 1 <= wnb, KnownNat wbd, 1 <= wbd, KnownNat bnb, 1 <= bnb, KnownNat bbd, 1 <= bbd )
  => Signal dom Bool
  -> Banks wnb wbd
  -> Banks bnb bbd
  -> Update dom n g pe wb bb au bau
  -> Update dom n g pe wb bb xd gb
batched updating wSumBanks bSumBanks inner = Update (5 + updateCycles inner) writes
  where
    writes upd = updateWrites inner (mux updating summed (pure Nothing))
      where
        sumW = unpack <$> bankedRam wSumBanks (maybe 0 (\(a, _, _, _, _, _, _) -> a) <$> upd) (fmap packS <$> sumWWrite)
        sumB = unpack <$> bankedRam bSumBanks (maybe 0 (\(_, j, _, _, _, _, _) -> j) <$> upd) (fmap packS <$> sumBWrite)
        packS (a, vs) = (a, pack vs)
        held = alongRead upd
        withSums = register Nothing ((\h sw sb -> (\u -> (u, sw, sb)) <$> h) <$> held <*> sumW <*> sumB)
        summed = register Nothing (fmap added <$> withSums)
        added ((a, j, bias, ws, bs, xds, ds), sw, sb) =
          ( a, j, bias, ws, bs
          , zipWith (\t p -> t + resize p) (sw :: Vec pe (Signed au)) xds
          , zipWith (\t d -> t + resize d) (sb :: Vec pe (Signed bau)) ds )
        sumWWrite = (\u -> fmap (\(a, _, _, _, _, sw, _) -> (a, if u then repeat 0 else sw))) <$> updating <*> summed
        sumBWrite = (\u s -> s >>= \(_, j, bias, _, _, _, sb) -> if bias then Just (j, if u then repeat 0 else sb) else Nothing)
          <$> updating <*> summed

-- | A memory's initial contents: a file for each bank of @bd@ words (a power of two).
data Banks nb bd = Banks (SNat bd) (Vec nb FilePath)

-- | A memory of @n@ words in banks of @bd@ words, each bank a block RAM initialised from its
-- own file: a read's data three cycles after its address (the address registered first, as
-- it goes to every bank's blocks), registered as they leave their bank
-- (a register without reset, which the place-and-route flow folds into the block RAM's own
-- output register: the block's slow output then ends in the block) and then chosen by the
-- address's bank. One bank a block RAM deep needs no multiplexer after the slow output, where
-- a deeper memory in one piece would (yosys splits it in depth and chooses after the blocks).
-- The writes are registered as the read address is (so a read still sees every write issued
-- before it, and the write's address and data leave a flip-flop for the blocks across the
-- chip) and go to the bank of their address.
bankedRam
  :: forall nb bd n w dom
   . ( HiddenClockResetEnable dom, KnownNat nb, 1 <= nb, KnownNat bd, 1 <= bd, KnownNat n, 1 <= n, KnownNat w )
  => Banks nb bd
  -> Signal dom (Index n)
  -> Signal dom (Maybe (Index n, BitVector w))
  -> Signal dom (BitVector w)
bankedRam (Banks _ files) rd0 wr0 = (!!) <$> bundle (imap bank files) <*> chosen
  where
    bankOf :: Index n -> Index nb
    bankOf a = unpack (resize (pack a `shiftR` natToNum @(CLog 2 bd)))
    offsetOf :: Index n -> Index bd
    offsetOf a = unpack (resize (pack a))
    bank i file = delay 0 (blockRamFile (SNat @bd) file (offsetOf <$> rd) ((>>= mine) <$> wr))
      where
        mine (a, v) = if bankOf a == i then Just (offsetOf a, v) else Nothing
    rd = register 0 rd0
    wr = register Nothing wr0
    chosen = register 0 (register 0 (bankOf <$> rd))

-- | A stream delayed by as many cycles as a 'bankedRam' read takes, to meet its data.
alongRead :: (HiddenClockResetEnable dom, NFDataX a) => Signal dom (Maybe a) -> Signal dom (Maybe a)
alongRead = register Nothing . register Nothing . register Nothing

-- | The first of two streams that has a value.
(.<|>.) :: Signal dom (Maybe a) -> Signal dom (Maybe a) -> Signal dom (Maybe a)
a .<|>. b = (<|>) <$> a <*> b

-- | The factor of the input's derivative that needs a product (tanh's @1 - x^2@, sigmoid's
-- @x (1 - x)@), 0 for the others: computed as the operands leave, a product of its own.
derivFactor :: forall xb . KnownNat xb => Deriv -> Signed xb -> Signed (2 * xb + 2)
derivFactor (Tanh one) x = fromInteger (one * one) - resize x * resize x
derivFactor (Sigmoid one) x = resize x * (fromInteger one - resize x)
derivFactor _ _ = 0

-- | @back f'(x)@ exact: the derivative of the input's activation ('Deriv') from its value (and
-- its factor, 'derivFactor').
applyDeriv :: forall bu xb . (KnownNat bu, KnownNat xb) => Deriv -> Signed xb -> Signed (2 * xb + 2) -> Signed bu -> Signed (bu + 2 * xb + 2)
applyDeriv Pass _ _ back = resize back
applyDeriv Positive x _ back = if x > 0 then resize back else 0
applyDeriv _ _ f back = back `mul` f

-- | What the loss is doing: waiting for the logits, finding their maximum, reading their
-- exponentials (and summing them), dividing, answering.
data LossPhase = LWait | LMax | LExp | LDiv | LAnswer
  deriving (Eq, Generic, NFDataX)

-- | The loss's state: its phase, the class @j@ it is at, the logits (rotated: class @j@'s at
-- the head), the maximum (and its class), the
-- exponentials read (the cycles of a read, where the next arrives), the division's cycle and its state ("K2C.Softmax"'s division),
-- the label's probability.
data Loss n ab eb w fo = Loss
  { lossPhase :: LossPhase
  , lossJ     :: Index (n + 1)
  , lossZs    :: Vec (n + 1) (Signed ab)
  , lossTop   :: Signed ab
  , lossClass :: Index (n + 1)
  , lossExps  :: Vec (n + 1) (Signed eb)
  , lossLag   :: Index 4
  , lossAt    :: Index (n + 1)
  , lossStep  :: Index (DivSteps fo + 2)
  , lossDiv   :: Division w fo
  , lossProb  :: Signed w
  }
  deriving (Generic, NFDataX)

-- | The output layer's softmax with cross-entropy (K2C.Softmax's arithmetic, one value at a
-- time): its @g@ words of pre-activations @z@ (@ab@ bits, @af@ of them fraction) collected;
-- their maximum and the predicted class (the largest @z@, the lowest index on ties), a value a
-- cycle; the exponentials @e_j@ read from the table one a cycle (a register before the read,
-- the read, its data: a block RAM's), their sum @S@; then each probability
-- @p_j = floor((2 e_j 2^gf + S) / (2 S))@ (saturated to @gi + gf@ bits) by a long division of
-- @gf + 1@ quotient bits, a bit a cycle, and its gradient @p_j - [j = label]@ (exact,
-- saturated) given as it is known; then the answer: the class and @p@ of the label. An
-- inference (@training@ low) gives the answer alone. @w@ is the sum's and the division's width.
--
-- Timing: the last word of @z@ in cycle @t@; the maximum's @n + 1@ cycles from @t + 2@, the
-- exponentials' @n + 1 + 3@ after them, then each class's division in @gf + 3@ cycles (its
-- start, @gf + 1@ steps, its gradient), the first gradient 'LossLatency' cycles after @t@;
-- the answer in the cycle after the last gradient.
softmaxLoss
  :: forall w n g pe m s eb ab af gi gf dom
   . ( HiddenClockResetEnable dom
     , KnownNat w, KnownNat n, KnownNat g, 1 <= g, KnownNat pe, 1 <= pe, n + 1 <= g * pe
     , KnownNat m, 1 <= m, KnownNat s, KnownNat eb, KnownNat ab, KnownNat af, KnownNat gi, KnownNat gf )
  => SNat s
  -> TableRom m (Signed eb)
  -> Signal dom Bool
  -> Signal dom (Maybe (Vec pe (Signed ab)))
  -> Signal dom (Index (n + 1))
  -> (Signal dom (Maybe (Signed (gi + gf))), Signal dom (Maybe (Index (n + 1), Signed (gi + gf))))
softmaxLoss SNat (TableRom rom) training zWord label = (grads, answer)
  where
    (logits, complete) = collectWords @(n + 1) @g zWord

    start :: Loss n ab eb w gf
    start = Loss LWait 0 (repeat 0) 0 0 (repeat 0) 0 0 0 (0, 0, 0) 0
    state = register start (advance <$> state <*> complete <*> logits <*> tableData)
    -- the logits pass the head of a rotating register, class j's in step j of the maximum and
    -- of the exponentials' reads: no multiplexer of the classes before the comparison and the
    -- table's address

    -- the exponentials: the index registered, the table read (a block RAM's synchronous
    -- read), its data registered
    index = register 0 (indexOf <$> state)
    indexOf st = if d >= last' then maxBound else fromIntegral d
      where
        d = shiftR (resize (lossTop st) - resize (head (lossZs st)) :: Signed (ab + 2)) (natToNum @s)
        last' = fromInteger (natToInteger @m - 1)
    tableRead = register 0 (rom <$> index)
    tableData = register 0 tableRead

    advance st go zs e = case lossPhase st of
      LWait | go -> st { lossPhase = LMax, lossJ = 0, lossZs = zs }
            | otherwise -> st
      LMax ->
        let z = head (lossZs st)
            bigger = lossJ st == 0 || z > lossTop st
            st' = (if bigger then st { lossTop = z, lossClass = lossJ st } else st) { lossZs = rotateLeftS (lossZs st) d1 }
        in  if lossJ st == maxBound then st' { lossPhase = LExp, lossJ = 0, lossLag = 0, lossAt = 0, lossProb = 0 }
            else st' { lossJ = lossJ st + 1 }
      -- j issues index j; from the read's third cycle on, an exponential arrives each cycle
      -- (class lossAt's); the sum is kept in lossProb
      LExp ->
        let arrived = lossLag st == maxBound
            exps' = if arrived then replace (lossAt st) e (lossExps st) else lossExps st
            total = if arrived then lossProb st + resize e else lossProb st
        in  if arrived && lossAt st == maxBound
            then st { lossPhase = LDiv, lossJ = 0, lossStep = 0, lossExps = exps', lossProb = total }
            else st { lossLag = if arrived then maxBound else lossLag st + 1
                    , lossAt = if arrived then lossAt st + 1 else lossAt st
                    , lossJ = if lossJ st == maxBound then maxBound else lossJ st + 1
                    , lossZs = rotateLeftS (lossZs st) d1
                    , lossExps = exps', lossProb = total }
      LDiv
        | lossStep st == 0 -> begin st
        | lossStep st <= natToNum @(DivSteps gf) -> divide st
        | lossJ st == maxBound -> st { lossPhase = LAnswer }
        | otherwise -> st { lossJ = lossJ st + 1, lossStep = 0 }
      LAnswer -> st { lossPhase = LWait }

    -- the division of step 4 (K2C.Softmax's), a quotient bit a cycle
    begin st = st { lossStep = 1, lossDiv = Softmax.begin (lossProb st) (resize (lossExps st !! lossJ st)) }
    divide st = st { lossStep = lossStep st + 1, lossDiv = Softmax.step (divisorOf (lossProb st)) (lossDiv st) }

    -- a probability once its division is done (saturated), its gradient
    prob st = unSF (quotient @w @gf @gi (lossDiv st))
    finished st = lossPhase st == LDiv && lossStep st == natToNum @(DivSteps gf + 1)
    grads = register Nothing (mux training ((\st lbl -> if finished st then Just (gradient st lbl) else Nothing) <$> state <*> label) (pure Nothing))
    gradient st lbl = roundTo @(gi + gf + 2) 0 (resize (prob st) - (if lossJ st == lbl then bit (natToNum @gf) else 0))
    labelProb = register 0 ((\st lbl p -> if finished st && lossJ st == lbl then prob st else p) <$> state <*> label <*> labelProb)
    answer = (\st p -> if lossPhase st == LAnswer then Just (lossClass st, p) else Nothing) <$> state <*> labelProb

-- | The last layer's output words (@g@ words of @pe@ values) gathered: its first @n@ values as
-- the last word is in (a register), and that cycle marked.
collectWords
  :: forall n g pe a dom
   . (HiddenClockResetEnable dom, KnownNat n, KnownNat g, 1 <= g, KnownNat pe, n <= g * pe, NFDataX a, Num a)
  => Signal dom (Maybe (Vec pe a))
  -> (Signal dom (Vec n a), Signal dom Bool)
collectWords word = ((\(_, vs) -> map (vs !!) (indicesI @n)) <$> collected, complete)
  where
    collected = register (0 :: Index g, repeat @(g * pe) 0) (collect <$> word <*> collected)
    collect (Just vs) (k, acc) =
      (if k == maxBound then 0 else k + 1, concat (replace k vs (unconcatI @g @pe acc)))
    collect Nothing held = held
    complete = register False ((\v (k, _) -> isJust v && k == maxBound) <$> word <*> collected)

-- | Cycles from the last output word of the network's last layer to the first gradient of the
-- mean squared error ('mseLoss').
type MseLatency = 5

-- | The mean squared error at the output: the last layer's @n + 1@ outputs @y@ (words of @pe@,
-- collected) against the host's targets @t@ (in @y@'s format), each output's gradient
-- @roundTo((y_j - t_j) f'(y_j))@ (@f'@ of the output's activation from @y@ alone, 'Deriv';
-- @shift@: the product's fraction minus the gradient format's) a value a cycle, then the
-- answer: the outputs. The mean's @2/n@ is in the update's scale. An inference (@training@
-- low) gives the answer alone, in the same cycle.
--
-- Timing: the last word of @y@ in cycle @t@; the outputs and the targets load rotating
-- registers in @t + 1@, output @j@'s at their heads in @t + 2 + j@; its difference and the
-- derivative's factor, their product, the rounding: its gradient in @t + 'MseLatency' + j@;
-- the answer with the last gradient.
mseLoss
  :: forall n g pe ab gb dom
   . ( HiddenClockResetEnable dom, KnownNat n, KnownNat g, 1 <= g, KnownNat pe, 1 <= pe
     , n + 1 <= g * pe, KnownNat ab, KnownNat gb )
  => Deriv
  -> Int
  -> Signal dom Bool
  -> Signal dom (Maybe (Vec pe (Signed ab)))
  -> Signal dom (Vec (n + 1) (Signed ab))
  -> (Signal dom (Maybe (Signed gb)), Signal dom (Maybe (Vec (n + 1) (Signed ab))))
mseLoss deriv shift training yWord targets = (grads, answer)
  where
    (outputs, complete) = collectWords @(n + 1) @g yWord
    walk = register (Nothing :: Maybe (Index (n + 1)), repeat 0, repeat 0) (advance <$> walk <*> complete <*> outputs <*> targets)
    advance _ True ys ts = (Just 0, ys, ts)
    advance (Just j, ys, ts) False _ _ = (if j == maxBound then Nothing else Just (j + 1), rotateLeftS ys d1, rotateLeftS ts d1)
    advance held False _ _ = held
    diffs = register Nothing (difference <$> walk)
    difference (j, ys, ts) = (\_ -> (head ys, resize (head ys) - resize (head ts) :: Signed (ab + 1), derivFactor deriv (head ys))) <$> j
    products = register Nothing (fmap (\(y, d, f) -> applyDeriv deriv y f d) <$> diffs)
    grads = register Nothing (mux training (fmap (roundTo @(ab + 1 + (2 * ab + 2)) @gb shift) <$> products) (pure Nothing))
    walked = (\(j, _, _) -> j == Just maxBound) <$> walk
    answered = register False (register False (register False walked))
    answer = mux answered (Just <$> outputs) (pure Nothing)

-- | Where the host's control is in a message.
data HostState nIn nt np = Idle | Values Bool (Index nIn) | Target (Index nt) | Reading | Writing (Index np) | Written
  deriving (Eq, Generic, NFDataX)

-- | The host's side of the core (docs/guide/training.md, "The host's protocol"). A message is a
-- command word, then its words: 0 trains on a sample (its @nIn@ values, then its @nt@ target
-- words: the label, or the outputs' targets; the answer: the loss's), 1 infers (its @nIn@
-- values; the answer: the loss's), 2 reads the weights (the answer: every layer's weights row by row, then its biases),
-- 3 writes them (the same @np@ values in; the answer: one word, 0), 4 trains on a sample
-- without the update (a batch's samples but its last; the words and the answer as 0's; a
-- core whose layers update at every sample updates anyway). Other command words are
-- dropped. A command is taken once the previous message is done (@idle@: every layer fills
-- and no answer waits, and the previous sample's answer was given).
--
-- In: the host's words, the core's idleness, the answer of a sample (a pulse), the last
-- layer's transfer ending (a pulse), the host's readiness for an output word. Out: the
-- host's ready, a sample's value (to the first layer), its target words, what the layers see
-- ('HostIn'), the start of a transfer (to the first layer), the end of a write (a pulse).
hostControl
  :: forall nIn nt np dom
   . (HiddenClockResetEnable dom, KnownNat nIn, 1 <= nIn, KnownNat nt, 1 <= nt, KnownNat np, 1 <= np)
  => Signal dom (Maybe HostWord)
  -> Signal dom Bool
  -> Signal dom Bool
  -> Signal dom Bool
  -> Signal dom Bool
  -> ( Signal dom Bool, Signal dom (Maybe HostWord), Signal dom (Maybe HostWord), HostIn dom
     , Signal dom (Maybe Command), Signal dom Bool )
hostControl hostWords idle answered transferEnd outReady =
  (ready, sampleValue, targetValue, HostIn training updating outReady writeValue, startTransfer, writeEnded)
  where
    state = register (Idle :: HostState nIn nt np) (step <$> state <*> moved <*> command <*> transferEnd)
    waiting = register False (mux (moved .&&. starts) (pure True) (mux answered (pure False) waiting))
    starts = ((== Idle) <$> state) .&&. (isSample <$> command)
    isSample c = c == Just TrainCmd || c == Just InferCmd || c == Just AccumulateCmd
    ready = readyOf <$> state <*> (idle .&&. (not <$> waiting))
    readyOf Idle free = free
    readyOf Reading _ = False
    readyOf Written _ = False
    readyOf _ _ = True
    moved = (isJust <$> hostWords) .&&. ready
    word = fromJustX <$> hostWords
    command = decode <$> word
    decode w = case w of
      0 -> Just TrainCmd
      1 -> Just InferCmd
      2 -> Just ReadCmd
      3 -> Just WriteCmd
      4 -> Just AccumulateCmd
      _ -> Nothing

    step Idle True (Just TrainCmd) _ = Values True 0
    step Idle True (Just InferCmd) _ = Values False 0
    step Idle True (Just AccumulateCmd) _ = Values True 0
    step Idle True (Just ReadCmd) _ = Reading
    step Idle True (Just WriteCmd) _ = Writing 0
    step (Values t k) True _ _
      | k /= maxBound = Values t (k + 1)
      | t = Target 0
      | otherwise = Idle
    step (Target k) True _ _ = if k == maxBound then Idle else Target (k + 1)
    step Reading _ _ True = Idle
    step (Writing k) True _ _ = if k == maxBound then Written else Writing (k + 1)
    step Written _ _ True = Idle
    step st _ _ _ = st

    inValues (Values _ _) = True
    inValues _ = False
    -- the words for the layers leave from registers (a cycle after they moved in)
    sampleValue = register Nothing (mux (moved .&&. (inValues <$> state)) (Just <$> word) (pure Nothing))
    targetValue = register Nothing (mux (moved .&&. (inTarget <$> state)) (Just <$> word) (pure Nothing))
    inTarget (Target _) = True
    inTarget _ = False
    training = register True (mux (moved .&&. starts) ((\c -> c == Just TrainCmd || c == Just AccumulateCmd) <$> command) training)
    updating = register True (mux (moved .&&. starts) ((/= Just AccumulateCmd) <$> command) updating)
    startTransfer = register Nothing (mux (moved .&&. ((== Idle) <$> state)) (transferOf <$> command) (pure Nothing))
    transferOf c = if c == Just ReadCmd || c == Just WriteCmd then c else Nothing
    writeValue = register Nothing (mux (moved .&&. (isWriting <$> state)) (Just <$> word) (pure Nothing))
    isWriting (Writing _) = True
    isWriting _ = False
    writeEnded = ((== Written) <$> state) .&&. transferEnd

-- | The start of the next layer's transfer: as this one's ends, the same kind.
nextStart :: TrainLayerOut dom g pe nIn gpb ab wb bb -> Signal dom (Maybe Command)
nextStart l = (\d p -> if d then Just (if p == Read then ReadCmd else WriteCmd) else Nothing) <$> transferDone l <*> layerPhase l

-- | The core's output words: a sample's answer (up to @k@ words and how many: the loss's), a
-- write's acknowledgement (0), a read's values (they pass through, the last layer's last
-- marked); the last word of each marked. In: the answer of a sample, the end of a write, the
-- read values, the host's readiness. Out: the words, and whether an answer waits.
hostAnswers
  :: forall k dom
   . (HiddenClockResetEnable dom, KnownNat k, 1 <= k)
  => Signal dom (Maybe (Vec k HostWord, Index (k + 1)))
  -> Signal dom Bool
  -> Signal dom (Maybe (HostWord, Bool))
  -> Signal dom Bool
  -> (Signal dom (Maybe (HostWord, Bool)), Signal dom Bool)
hostAnswers answer writeEnded reads outReady = (pendingWord .<|>. reads, isJust <$> pending)
  where
    pending = register Nothing (respond <$> pending <*> fresh <*> outReady)
    fresh = (\a ended -> if ended then Just (repeat 0, 1) else a) <$> answer <*> writeEnded
    respond _ (Just a) _ = Just a
    respond (Just (ws, left)) Nothing True = if left == 1 then Nothing else Just (rotateLeftS ws d1, left - 1)
    respond held Nothing _ = held
    pendingWord = fmap (\(ws, left) -> (leToPlus @1 @k head ws, left == 1)) <$> pending
